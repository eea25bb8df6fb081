"""How ooze's C++ side runs users' hooks; hooks never import this.

C++ hands samples over as plain dicts (python/python_hook.h) and gets plain values back, so the
hook sees Python objects it may change freely, and what comes back is checked here, where the
Python types are still known, with errors that name the hook, the sample and what was expected.

Async hooks run on one asyncio event loop on its own thread: the rewards of a rollout are all
submitted at once and overlap. Sync hooks run on the caller's thread (ooze's reward threads);
the GIL is released whenever they wait on I/O or sleep.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import importlib
import inspect
import json
import math
import numbers
import os
import threading
import time
import traceback

import ooze

from .function_path import HookLoadError, load_function
from .generation import _generation as generation
from .sample import Sample, from_ooze, to_ooze_dict


_NOT_USERS = (
    os.path.dirname(__file__) + os.sep,
    os.path.dirname(importlib.__file__) + os.sep,
    "<frozen importlib",
)


class HookError(Exception):
    """What ooze reports when a hook cannot load, raises, or returns the wrong thing."""


class Hook:
    def __init__(self, function, path: str, flag: str, parameters: list):
        self.function = function
        self.name = f"{flag} {path}"
        self.is_async = _is_async(function)
        self.parameters = parameters  # what ooze calls it with: the signature it accepted


def _is_async(function) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)
    )


def _traceback(error: BaseException) -> str:
    """The traceback from the user's own frames down (ooze's and the importer's say nothing)."""
    frames = error.__traceback__
    while frames is not None and frames.tb_frame.f_code.co_filename.startswith(_NOT_USERS):
        frames = frames.tb_next
    return "".join(traceback.format_exception(type(error), error, frames)).rstrip()


def _call_text(path: str, parameters: list, by_keyword: bool) -> str:
    arguments = (f"{name}=..." for name in parameters) if by_keyword else parameters
    return f"{path}({', '.join(arguments)})"


def load_hook(path: str, flag: str, signatures: list, by_keyword: bool = False) -> Hook:
    """Loads `path` for `flag` and checks that it can be called with one of `signatures` (lists of
    parameter names, in the order ooze tries them), passed by position, or by keyword."""
    try:
        function = load_function(path)
    except HookLoadError as error:
        raise HookError(f"{flag} {path}: {error}") from None
    except BaseException as error:
        raise HookError(f"{flag} {path}: importing it raised\n{_traceback(error)}") from None
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # some builtins have none: nothing to check
        return Hook(function, path, flag, signatures[0])
    refusal = None
    for parameters in signatures:
        try:
            if by_keyword:
                signature.bind(**dict.fromkeys(parameters))
            else:
                signature.bind(*parameters)
            return Hook(function, path, flag, parameters)
        except TypeError as error:
            refusal = refusal or error
    calls = " or ".join(_call_text(path, parameters, by_keyword) for parameters in signatures)
    raise HookError(
        f"{flag} {path}: ooze calls it as {calls}, but it is declared "
        f"({', '.join(signature.parameters)}): {refusal}"
    ) from None


# --- the run's flags -------------------------------------------------------------------------

_args = argparse.Namespace()


def set_args(flags: dict) -> None:
    """Every flag of the run, under Slime's underscore names: `args` of every hook, `ooze.args`."""
    # In place: hooks that imported `args` at load time see the run's later additions too.
    vars(_args).clear()
    vars(_args).update(flags)
    ooze.args = _args


# --- the event loop --------------------------------------------------------------------------

_loop = None
_loop_lock = threading.Lock()


def _event_loop():
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="ooze-hooks", daemon=True).start()
            _loop = loop
    return _loop


def _wait(awaitable):
    """Runs `awaitable` on the hooks' loop; the caller waits with the GIL released."""

    async def run():
        return await awaitable

    return asyncio.run_coroutine_threadsafe(run(), _event_loop()).result()


# --- rewards ---------------------------------------------------------------------------------


def _checked_reward(value):
    """The reward as JSON can carry it; raises ValueError saying what was expected."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ValueError(f"{value!r}, but a reward must be a finite number")
        return value if isinstance(value, (int, float)) else float(value)
    if isinstance(value, dict):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"a dict ooze cannot store ({error}): {value!r:.200}") from None
        return value
    raise ValueError(
        f"a {type(value).__name__} ({value!r:.80}), but a reward is a number or a dict of them"
    )


def _where(sample: Sample) -> str:
    return f"sample {sample.index} (group {sample.group_index})"


def _outcome(hook: Hook, sample: Sample, value):
    """[True, reward] or [False, what went wrong]."""
    if isinstance(value, BaseException):
        return [False, f"{hook.name} raised on {_where(sample)}:\n{_traceback(value)}"]
    try:
        return [True, _checked_reward(value)]
    except ValueError as error:
        return [False, f"{hook.name} on {_where(sample)} returned {error}"]


async def _await_together(coroutines: list) -> list:
    """Their values (or exceptions) in order, as gather(*coroutines, return_exceptions=True), but
    a coroutine that finishes at its first step (a reward that computes and returns) never gets a
    Task: a Task costs more than a trivial reward. Those that wait go on together."""
    values = [None] * len(coroutines)
    waiting = []
    for i, coroutine in enumerate(coroutines):
        try:
            yielded = coroutine.send(None)
        except StopIteration as stop:
            values[i] = stop.value
        except Exception as error:
            values[i] = error
        else:
            waiting.append((i, _resume(coroutine, yielded)))
    if waiting:
        done = await asyncio.gather(*(resumed for _, resumed in waiting), return_exceptions=True)
        for (i, _), value in zip(waiting, done):
            values[i] = value
    return values


async def _resume(coroutine, yielded):
    """Goes on with a coroutine whose first step ran outside a Task and yielded `yielded`: what a
    Task does, waiting for each future it yields before sending it on."""
    try:
        while True:
            if yielded is None:  # a bare yield (asyncio.sleep(0)): let the others run
                await asyncio.sleep(0)
            else:
                if getattr(yielded, "_asyncio_future_blocking", False):
                    yielded._asyncio_future_blocking = False  # taken, as a Task takes it
                try:
                    await yielded
                except Exception:
                    pass  # the coroutine reads the future's outcome itself when it goes on
            yielded = coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    finally:
        coroutine.close()


def reward_each(hook: Hook, records: list) -> dict:
    """Scores each sample with `hook(args, sample)`: {"outcomes": one per sample, in order,
    "seconds": the time spent in the hook}.

    An async hook's calls are all awaited at once; a sync hook's run one after the other (ooze
    spreads slow ones over its reward threads).
    """
    samples = [from_ooze(record) for record in records]
    start = time.perf_counter()
    if hook.is_async:
        # Bounded as a remote reward is: a reward awaiting a judge that never answers is cancelled.
        timeout = getattr(_args, "rm_timeout", None)

        async def score_all():
            return await asyncio.wait_for(
                _await_together([hook.function(_args, sample) for sample in samples]), timeout)

        try:
            values = _wait(score_all())
        except asyncio.TimeoutError:
            late = f"{hook.name} did not finish within --rm-timeout {timeout:g} s"
            return {"outcomes": [[False, f"{late} on {_where(s)}"] for s in samples],
                    "seconds": time.perf_counter() - start}
    else:
        values = []
        for sample in samples:
            try:
                value = hook.function(_args, sample)
                values.append(_wait(value) if inspect.isawaitable(value) else value)
            except Exception as error:
                values.append(error)
    seconds = time.perf_counter() - start
    outcomes = [_outcome(hook, sample, value) for sample, value in zip(samples, values)]
    return {"outcomes": outcomes, "seconds": seconds}


def reward_batch(hook: Hook, records: list) -> dict:
    """Scores the samples with one call, `hook(args, samples) -> list`: {"outcomes": one per
    sample}."""
    samples = [from_ooze(record) for record in records]
    try:
        values = hook.function(_args, samples)
        if inspect.isawaitable(values):
            values = _wait(values)
    except Exception as error:
        failure = f"{hook.name} raised on the {len(samples)} samples of " + (
            f"group {samples[0].group_index}" if samples else "an empty batch"
        )
        return {"outcomes": [[False, f"{failure}:\n{_traceback(error)}"]] * len(samples)}
    if not isinstance(values, (list, tuple)) or len(values) != len(samples):
        got = f"{len(values)} values" if isinstance(values, (list, tuple)) else repr(values)[:80]
        failure = f"{hook.name} returned {got} for {len(samples)} samples (one reward each)"
        return {"outcomes": [[False, failure]] * len(samples)}
    return {"outcomes": [_outcome(hook, s, v) for s, v in zip(samples, values)]}


# --- samples back to ooze --------------------------------------------------------------------


def _to_ooze(hook: Hook, sample) -> dict:
    if not isinstance(sample, Sample):
        raise HookError(f"{hook.name} returned a {type(sample).__name__} where a Sample belongs")
    return to_ooze_dict(sample)


def _groups_to_ooze(hook: Hook, groups) -> list:
    if not isinstance(groups, (list, tuple)) or not all(isinstance(g, (list, tuple)) for g in groups):
        raise HookError(f"{hook.name} returned {type(groups).__name__}, not a list of groups "
                        "(lists of Samples)")
    return [[_to_ooze(hook, sample) for sample in group] for group in groups]


def _raised(hook: Hook, on_what: str, error: BaseException) -> HookError:
    return HookError(f"{hook.name} raised on {on_what}:\n{_traceback(error)}")


# --- filters ---------------------------------------------------------------------------------


def filter_group(hook: Hook, records: list) -> dict:
    """Dynamic sampling: `hook(args, samples) -> DynamicFilterOutput | bool` on a finished group."""
    samples = [from_ooze(record) for record in records]
    try:
        verdict = hook.function(_args, samples)
    except Exception as error:
        raise _raised(hook, f"group {samples[0].group_index if samples else '?'}", error) from None
    if isinstance(verdict, bool):
        verdict = ooze.DynamicFilterOutput(keep=verdict)
    if not isinstance(verdict, ooze.DynamicFilterOutput):
        raise HookError(f"{hook.name} returned a {type(verdict).__name__} ({verdict!r:.80}); a "
                        "dynamic-sampling filter returns DynamicFilterOutput(keep, reason) or a bool")
    return {"keep": bool(verdict.keep), "reason": verdict.reason or ""}


def filter_buffer(hook: Hook, request: dict) -> dict:
    """Partial rollout: `hook(args, rollout_id, buffer, num_samples) -> groups` takes at most
    num_samples groups out of the buffer (removing them from it, in place)."""
    buffer = [[from_ooze(record) for record in group] for group in request["buffer"]]
    try:
        taken = hook.function(_args, None, buffer, request["num_samples"])
    except Exception as error:
        raise _raised(hook, f"a buffer of {len(buffer)} groups", error) from None
    return {"taken": _groups_to_ooze(hook, taken), "buffer": _groups_to_ooze(hook, buffer)}


# --- generate functions ----------------------------------------------------------------------


def generate_sample(hook: Hook, request: dict) -> list:
    """Runs `hook(args, sample, sampling_params)` to completion on the hooks' event loop, with
    ooze.generate and friends bound to the request's generation; returns the sample, or the
    samples it split the conversation into (a list, sharing rollout_id)."""
    sample = from_ooze(request["sample"])

    async def run():
        generation.set(request["generation"])
        result = hook.function(_args, sample, request["sampling_params"])
        return await result if inspect.isawaitable(result) else result

    try:
        result = _wait(run())
    except Exception as error:
        raise _raised(hook, _where(sample), error) from None
    if not isinstance(result, list):
        return [_to_ooze(hook, result)]
    if not result:
        raise HookError(f"{hook.name} returned no sample for {_where(sample)}")
    rollout_id = result[0].rollout_id if isinstance(result[0], Sample) else None
    if rollout_id is None:
        rollout_id = sample.index
    for piece in result:
        if isinstance(piece, Sample) and piece.rollout_id is None:
            piece.rollout_id = rollout_id
        if isinstance(piece, Sample) and piece.rollout_id != rollout_id:
            raise HookError(f"{hook.name} returned samples of rollout_id {rollout_id} and "
                            f"{piece.rollout_id} for {_where(sample)}; the samples of one "
                            "generate call share rollout_id")
    return [_to_ooze(hook, piece) for piece in result]


# --- whole rollouts --------------------------------------------------------------------------


def filter_samples(hook: Hook, groups: list) -> list:
    """`hook(args, groups) -> None` marks samples with remove_sample; returns where they are."""
    groups = [[from_ooze(record) for record in group] for group in groups]
    try:
        hook.function(_args, groups)
    except Exception as error:
        raise _raised(hook, f"a rollout of {len(groups)} groups", error) from None
    removed = [[g, i] for g, group in enumerate(groups) for i, sample in enumerate(group)
               if sample.remove_sample]
    return removed


def post_process_rewards(hook: Hook, records: list) -> list:
    """`hook(args, samples) -> (raw_rewards, rewards)`; returns the rewards, checked."""
    samples = [from_ooze(record) for record in records]
    try:
        answer = hook.function(_args, samples)
    except Exception as error:
        raise _raised(hook, f"a rollout of {len(samples)} samples", error) from None
    expected = f"(raw_rewards, rewards), two lists of {len(samples)} numbers"
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise HookError(f"{hook.name} returned {answer!r:.80}; expected {expected}")
    rewards = answer[1]
    if hasattr(rewards, "tolist"):  # a tensor or an array
        rewards = rewards.tolist()
    if not isinstance(rewards, (list, tuple)) or len(rewards) != len(samples):
        raise HookError(f"{hook.name} returned rewards {rewards!r:.80}; expected {expected}")
    for index, value in enumerate(rewards):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise HookError(f"{hook.name} returned reward {value!r} for {_where(samples[index])}; "
                            "expected a finite number")
    return [float(value) for value in rewards]


def log_rollout(hook: Hook, request: dict) -> bool:
    """`hook(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool`."""
    samples = [from_ooze(record) for record in request["samples"]]
    try:
        skip = hook.function(request["rollout_id"], _args, samples, request["metrics"],
                             request["rollout_time"])
    except Exception as error:
        raise _raised(hook, f"rollout {request['rollout_id']}", error) from None
    return bool(skip)


# --- data sources ----------------------------------------------------------------------------

# The --data-source-path instance of this process (one per run), built by new_data_source.
_data_source = None


def _call_bound(hook: Hook, generation_name: str, on_what: str, function, *arguments):
    """function(*arguments) with ooze.generate, ooze.tokenizer and friends bound to
    `generation_name`; an async function's coroutine runs to completion on the hooks' loop."""
    def call():
        generation.set(generation_name or None)
        return function(*arguments)

    try:
        result = contextvars.copy_context().run(call)
        if inspect.isawaitable(result):

            async def finish():
                generation.set(generation_name or None)
                return await result

            result = _wait(finish())
        return result
    except HookError:
        raise
    except Exception as error:
        raise _raised(hook, on_what, error) from None


def new_data_source(hook: Hook, request: dict) -> None:
    """--data-source-path: `hook(args)` builds the run's data source."""
    global _data_source
    source = _call_bound(hook, request["generation"], "construction", hook.function, _args)
    for method in ("get_samples", "add_samples"):
        if not callable(getattr(source, method, None)):
            raise HookError(f"{hook.name} built a {type(source).__name__}, which has no "
                            f"{method} method (a data source has get_samples(num_samples) and "
                            "add_samples(groups))")
    _data_source = source


def data_source_get(hook: Hook, request: dict) -> list:
    """`get_samples(num_samples)`: groups of fresh samples."""
    groups = _call_bound(hook, request["generation"], "get_samples", _data_source.get_samples,
                         request["num_samples"])
    return _groups_to_ooze(hook, groups)


def data_source_add(hook: Hook, request: dict) -> None:
    groups = [[from_ooze(record) for record in group] for group in request["groups"]]
    _call_bound(hook, request["generation"], "add_samples", _data_source.add_samples, groups)


def data_source_save(hook: Hook, request: dict) -> None:
    if hasattr(_data_source, "save"):
        _call_bound(hook, "", f"save({request['rollout_id']})", _data_source.save,
                    request["rollout_id"])


def data_source_load(hook: Hook, request: dict) -> None:
    if hasattr(_data_source, "load"):
        _call_bound(hook, "", f"load({request['rollout_id']})", _data_source.load,
                    request["rollout_id"])


class _RunDataSource:
    """The data source a rollout function gets: the groups --partial-rollout left unfinished
    first, then fresh prompts from the --data-source-path class (tokenized and numbered by ooze)
    or from --prompt-data. add_samples puts groups in that buffer, which checkpoints with the run;
    other attributes are the --data-source-path instance's."""

    def __init__(self, generation_name: str, user_source):
        self._generation = generation_name
        self._user_source = user_source

    def __getattr__(self, name):
        if self._user_source is None:
            raise AttributeError(f"the run's data source has no attribute {name!r}")
        return getattr(self._user_source, name)

    def __len__(self):
        return len(self._user_source) if self._user_source is not None else 0

    def get_samples(self, num_samples: int) -> list:
        import _ooze_native

        groups = _ooze_native.call(f"{self._generation}/get_samples", num_samples)
        return [[from_ooze(record) for record in group] for group in groups]

    def add_samples(self, samples: list) -> None:
        import _ooze_native

        _ooze_native.call(f"{self._generation}/add_samples",
                          [[to_ooze_dict(sample) for sample in group] for group in samples])


def _run_data_source(generation_name: str):
    return _RunDataSource(generation_name, _data_source)


# --- whole rollouts in Python ----------------------------------------------------------------


def _groups_of(hook: Hook, samples) -> list:
    """list[list[Sample]], or a flat list[Sample] grouped by group_index in order of appearance."""
    if isinstance(samples, (list, tuple)) and samples and all(isinstance(s, Sample) for s in samples):
        groups = {}
        for sample in samples:
            groups.setdefault(sample.group_index, []).append(sample)
        samples = list(groups.values())
    return _groups_to_ooze(hook, samples)


def _metrics(hook: Hook, metrics) -> dict:
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise HookError(f"{hook.name} returned metrics {metrics!r:.80}; expected a dict of numbers")
    checked = {}
    for key, value in metrics.items():
        if hasattr(value, "item"):  # a tensor or numpy scalar
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise HookError(f"{hook.name} returned metric {key!r} = {value!r:.80}; expected a number")
        checked[str(key)] = float(value)
    return checked


def _eval_data(hook: Hook, data) -> dict:
    if not isinstance(data, dict):
        raise HookError(f"{hook.name} returned {type(data).__name__} for an evaluation; expected "
                        "RolloutFnEvalOutput(data={name: {'rewards': [...], ...}}) or that dict")
    checked = {}
    for name, entry in data.items():
        rewards = entry.get("rewards") if isinstance(entry, dict) else None
        if not isinstance(rewards, (list, tuple)):
            raise HookError(f"{hook.name} returned evaluation data {name!r} without a list of "
                            "rewards")
        values = []
        for value in rewards:
            if isinstance(value, dict):
                value = value.get(getattr(_args, "eval_reward_key", None) or
                                  getattr(_args, "reward_key", None) or "", value)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise HookError(f"{hook.name} returned reward {value!r:.80} in evaluation data "
                                f"{name!r}; expected finite numbers")
            values.append(float(value))
        truncated = [bool(t) for t in entry.get("truncated", [])]
        if truncated and len(truncated) != len(values):
            raise HookError(f"{hook.name} returned {len(truncated)} truncated flags for "
                            f"{len(values)} rewards in evaluation data {name!r}")
        samples = entry.get("samples") or []
        checked[str(name)] = {"rewards": values, "truncated": truncated,
                              "samples": [_to_ooze(hook, s) for s in samples]}
    return checked


def run_rollout(hook: Hook, request: dict) -> dict:
    """`hook(args, rollout_id, data_source, evaluation)`: {"groups", "metrics"} for training, or
    {"data", "metrics"} for an evaluation."""
    name = request["generation"]
    evaluation = request["evaluation"]
    result = _call_bound(hook, name, f"rollout {request['rollout_id']}", hook.function, _args,
                         request["rollout_id"], _run_data_source(name), evaluation)
    if evaluation:
        if isinstance(result, ooze.RolloutFnEvalOutput):
            return {"data": _eval_data(hook, result.data), "metrics": _metrics(hook, result.metrics)}
        return {"data": _eval_data(hook, result), "metrics": {}}
    if isinstance(result, ooze.RolloutFnTrainOutput):
        return {"groups": _groups_of(hook, result.samples), "metrics": _metrics(hook, result.metrics)}
    return {"groups": _groups_of(hook, result), "metrics": {}}


def process_all_samples(hook: Hook, request: dict) -> None:
    """--rollout-all-samples-process-path: `hook(args, groups, data_source)` on every finished
    group of the rollout, those the dynamic-sampling filter dropped included."""
    groups = [[from_ooze(record) for record in group] for group in request["groups"]]
    name = request["generation"]
    _call_bound(hook, name, f"the {len(groups)} groups of a rollout", hook.function, _args,
                groups, _run_data_source(name))


def log_eval_rollout(hook: Hook, request: dict) -> bool:
    """`hook(rollout_id, args, data, extra_metrics) -> bool`."""
    data = {
        name: {"rewards": entry["rewards"], "truncated": entry["truncated"],
               "samples": [from_ooze(record) for record in entry["samples"]]}
        for name, entry in request["data"].items()
    }
    try:
        skip = hook.function(request["rollout_id"], _args, data, request["metrics"])
    except Exception as error:
        raise _raised(hook, f"the evaluation before rollout {request['rollout_id']}", error) from None
    return bool(skip)


# --- train data ------------------------------------------------------------------------------

# The keys of Slime's train data that ooze reads (launcher/python_train_data.h); others are left
# in Python, so a converter may return keys ooze has no use for (and values JSON cannot carry).
_TRAIN_DATA_KEYS = ("tokens", "response_lengths", "rewards", "loss_masks", "rollout_log_probs",
                    "teacher_log_probs", "raw_reward", "truncated", "sample_indices")


def _as_list(value):
    """A tensor or an array as a list, so that a converter may return either."""
    return value.tolist() if hasattr(value, "tolist") else value


def convert_samples_to_train_data(hook: Hook, groups: list) -> dict:
    """`hook(args, samples) -> dict` on the rollout's groups of Samples: the train data, with
    tensors and arrays (the whole value, or each sample's) as lists."""
    samples = [[from_ooze(record) for record in group] for group in groups]
    try:
        data = hook.function(_args, samples)
    except Exception as error:
        raise _raised(hook, f"a rollout of {len(samples)} groups", error) from None
    if not isinstance(data, dict):
        raise HookError(f"{hook.name} returned a {type(data).__name__}; expected a dict of train "
                        "data with Slime's keys (tokens, response_lengths, rewards, loss_masks, "
                        "...), one entry per sample each")
    train_data = {}
    for key in _TRAIN_DATA_KEYS:
        if key in data:
            value = _as_list(data[key])
            if isinstance(value, (list, tuple)):
                value = [_as_list(item) for item in value]
            train_data[key] = value
    return train_data


def postprocess_rollout_data(hook: Hook, rollout_id: int, rollout_data: dict) -> None:
    """`hook(args)` (Slime's) or `hook(args, rollout_id, rollout_data)`, which may change the
    rollout data's tensors in place."""
    try:
        if len(hook.parameters) == 1:
            hook.function(_args)
        else:
            hook.function(_args, rollout_id, rollout_data)
    except Exception as error:
        raise _raised(hook, f"rollout {rollout_id}", error) from None
