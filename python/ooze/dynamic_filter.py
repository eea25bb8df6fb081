"""A dynamic-sampling filter's verdict on a finished group (Slime's DynamicFilterOutput)."""

import dataclasses
from typing import Optional


@dataclasses.dataclass
class DynamicFilterOutput:
    keep: bool
    reason: Optional[str] = None  # why a group was dropped, counted in the rollout's metrics
