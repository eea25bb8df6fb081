"""One generated sample, as hooks see it: Slime's Sample, field for field.

A Slime hook ports by changing its import line (``from ooze import Sample``). ooze copies a
sample into this class before a hook runs and reads back what the hook may change; everything
here is plain Python, so ``sample.tokens.append(t)`` or ``sample.metadata["k"] = v`` act as
they would in Slime.

Token layout: ``tokens`` is the prompt followed by the response; ``loss_mask``,
``rollout_log_probs``, ``weight_versions`` and ``teacher_log_probs`` cover the response only.
``teacher_log_probs`` is None unless a distillation teacher scored the sample
(``--use-opd --opd-type engine``).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional, Union


@dataclasses.dataclass
class Sample:
    class Status(enum.Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"  # a tool or API call failed; ooze drops the sample from training

    group_index: Optional[int] = None  # the prompt's index in the run; a group shares it
    index: Optional[int] = None  # the sample's index in the run
    prompt: Union[str, list] = ""  # the text the engine saw (chat template applied)
    tokens: list = dataclasses.field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Optional[str] = None
    reward: Optional[Union[float, dict]] = None
    loss_mask: Optional[list] = None
    weight_versions: list = dataclasses.field(default_factory=list)
    rollout_log_probs: Optional[list] = None
    teacher_log_probs: Optional[list] = None
    remove_sample: bool = False  # set by a rollout sample filter: kept for advantages, not trained
    status: "Sample.Status" = Status.PENDING
    metadata: dict = dataclasses.field(default_factory=dict)
    generate_function_path: Optional[str] = None
    train_metadata: Optional[dict] = None
    session_id: Optional[str] = None
    # One execution of a generate function: the samples it splits a conversation into share it.
    rollout_id: Optional[int] = None
    non_generation_time: float = 0.0
    # ooze's own: the dataset's tools, why an aborted sample was aborted, and free-form numbers
    # averaged into the rollout's metrics.
    tools: Any = None
    abort_reason: str = ""
    metrics: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        out["status"] = self.status.value
        return out

    @staticmethod
    def from_dict(data: dict) -> "Sample":
        """Builds a sample from to_dict()'s form; keys Sample does not declare become attributes."""
        sample = Sample(**{key: value for key, value in data.items() if key in _FIELD_NAMES})
        if isinstance(sample.status, str):
            sample.status = Sample.Status(sample.status)
        for key in data.keys() - _FIELD_NAMES:
            setattr(sample, key, data[key])
        return sample

    def get_reward_value(self, args) -> float:
        """The scalar reward: ``reward`` itself, or its ``args.reward_key`` field."""
        key = getattr(args, "reward_key", None)
        return self.reward if not key else self.reward[key]

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length


_FIELD_NAMES = frozenset(field.name for field in dataclasses.fields(Sample))

# The fields ooze's own Sample keeps (rollout/sample.h); Slime's others live in Python only.
_OOZE_FIELDS = (
    "group_index", "index", "prompt", "tokens", "response", "response_length", "label",
    "metadata", "tools", "reward", "loss_mask", "rollout_log_probs", "weight_versions",
    "status", "abort_reason", "metrics", "rollout_id", "teacher_log_probs",
)


# Slime's fields ooze does not keep, at their defaults (all immutable).
_SLIME_DEFAULTS = {
    field.name: field.default
    for field in dataclasses.fields(Sample)
    if field.name not in _OOZE_FIELDS and field.default is not dataclasses.MISSING
}
_STATUS = {status.value: status for status in Sample.Status}


def from_ooze(record: dict) -> Sample:
    """A sample from ooze's own record (every field of _OOZE_FIELDS, fresh objects): the quick
    path of Sample.from_dict, taken for every sample a hook sees."""
    sample = Sample.__new__(Sample)
    values = sample.__dict__
    values.update(_SLIME_DEFAULTS)
    values.update(record)
    sample.status = _STATUS[record["status"]]
    if not values.get("teacher_log_probs"):
        values["teacher_log_probs"] = None  # Slime's: no teacher scored it
    return sample


def to_ooze_dict(sample: Sample) -> dict:
    """What ooze's C++ side reads back of a sample (it checks the lengths and types)."""
    data = {name: getattr(sample, name) for name in _OOZE_FIELDS}
    if sample.label is None:
        data["label"] = ""
    status = sample.status
    data["status"] = status.value if isinstance(status, Sample.Status) else status
    for name in ("loss_mask", "rollout_log_probs", "teacher_log_probs"):
        if data[name] is None:
            data[name] = []
    return data


def update_from_ooze_dict(sample: Sample, data: dict) -> None:
    """Takes ooze's new values of a sample into the same Python object (hooks may hold it)."""
    for name in _OOZE_FIELDS:
        if name in data:
            setattr(sample, name, data[name])
    sample.status = Sample.Status(sample.status)
    if not sample.teacher_log_probs:
        sample.teacher_log_probs = None
