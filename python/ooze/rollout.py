"""What a whole-rollout function (--rollout-function-path, --eval-function-path) and a data
source (--data-source-path) return and implement, under Slime's names.

    import ooze

    def generate_rollout(args, rollout_id, data_source, evaluation=False):
        groups = data_source.get_samples(args.rollout_batch_size)    # list[list[Sample]]
        asyncio.run(generate_all(groups))          # ooze.generate / ooze.score on each group
        return ooze.RolloutFnTrainOutput(samples=groups, metrics={"rollout/my_metric": 1.0})

A rollout function may also return the groups alone. With evaluation=True it returns
``RolloutFnEvalOutput(data={name: {"rewards": [...], "truncated": [...], "samples": [...]}})``
(or that dict alone).

A data source is a class built with ``cls(args)``; ooze calls ``get_samples(num_samples)`` for
num_samples groups of fresh samples (each sample's prompt text or its prompt tokens set),
``add_samples(groups)`` with groups a rollout left unfinished (--partial-rollout), and
``save(rollout_id)`` / ``load(rollout_id)`` when the run writes and resumes a checkpoint (write
the state under ``args.save``, read it from ``args.load``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional


@dataclasses.dataclass
class RolloutFnTrainOutput:
    samples: list  # list[list[Sample]]: the groups the trainer trains on
    metrics: Optional[dict] = None  # logged with the rollout's line, under the keys given


@dataclasses.dataclass
class RolloutFnEvalOutput:
    data: dict  # {dataset name: {"rewards": [...], "truncated": [...], "samples": [...]}}
    metrics: Optional[dict] = None


class DataSource:
    """The base of a --data-source-path class (subclassing it is optional)."""

    def __init__(self, args: Any):
        self.args = args

    def get_samples(self, num_samples: int) -> list:
        raise NotImplementedError

    def add_samples(self, samples: list) -> None:
        raise NotImplementedError

    def save(self, rollout_id: int) -> None:
        pass

    def load(self, rollout_id: Optional[int] = None) -> None:
        pass

    def __len__(self) -> int:
        raise NotImplementedError
