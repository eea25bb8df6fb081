"""The parallel layout a custom loss may ask about, under the names of Megatron's ``mpu`` that
Slime's losses call, so that ``from megatron.core import mpu`` ports as ``from ooze import mpu``.

ooze's trainer is data-parallel FSDP with optional context parallelism, and a loss always sees
whole samples: under context parallelism the log-probs are gathered over the group before the
loss runs. So there is no pipeline (every rank is the last stage), no tensor parallelism, and, as
far as a loss's tensors go, no context parallelism either (size 1, rank 0). The data-parallel
size and rank are the run's, set by the trainer before each call.
"""

_data_parallel_rank = 0
_data_parallel_size = 1


def _set_data_parallel(rank: int, size: int) -> None:
    global _data_parallel_rank, _data_parallel_size
    _data_parallel_rank, _data_parallel_size = rank, size


def is_pipeline_last_stage(ignore_virtual: bool = False) -> bool:
    return True


def is_pipeline_first_stage(ignore_virtual: bool = False) -> bool:
    return True


def get_context_parallel_world_size() -> int:
    """1: the tensors a loss gets hold whole samples, whatever --context-parallel-size is."""
    return 1


def get_context_parallel_rank() -> int:
    return 0


def get_tensor_model_parallel_world_size() -> int:
    return 1


def get_tensor_model_parallel_rank() -> int:
    return 0


def get_data_parallel_world_size(with_context_parallel: bool = False) -> int:
    return _data_parallel_size


def get_data_parallel_rank(with_context_parallel: bool = False) -> int:
    return _data_parallel_rank
