"""ooze for users' hooks: what a reward function, filter or generate function imports.

    from ooze import Sample

    async def reward_func(args, sample, **kwargs):
        return float(sample.response.strip() == sample.label)

Run with ``ooze train --custom-rm-path my_rewards.reward_func`` (or ``my_rewards.py:reward_func``).
Inside a run, ``ooze.args`` holds every flag of the run under Slime's underscore names; plain
``python3`` can import this package too (put ooze's ``python/`` folder on PYTHONPATH), so
hooks can be tried on their own.
"""

import argparse

from .dynamic_filter import DynamicFilterOutput
from .function_path import load_function
from .generation import append_observation, generate, remaining_budget, tokenizer
from .sample import Sample

# Replaced by the run's flags when ooze starts a hook.
args = argparse.Namespace()

__all__ = [
    "Sample",
    "DynamicFilterOutput",
    "load_function",
    "args",
    "generate",
    "append_observation",
    "remaining_budget",
    "tokenizer",
]
