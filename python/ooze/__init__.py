"""ooze for users' hooks: what a reward function, filter, generate function or loss imports.

    from ooze import Sample

    async def reward_func(args, sample, **kwargs):
        return float(sample.response.strip() == sample.label)

Run with ``ooze train --custom-rm-path my_rewards.reward_func`` (or ``my_rewards.py:reward_func``).
Inside a run, ``ooze.args`` holds every flag of the run under Slime's underscore names; plain
``python3`` can import this package too (put ooze's ``python/`` folder on PYTHONPATH), so
hooks can be tried on their own.

A whole rollout (``--rollout-function-path``) returns ``RolloutFnTrainOutput``; a data source
(``--data-source-path``) may subclass ``DataSource`` (ooze/rollout.py).

A custom loss (``--loss-type custom_loss --custom-loss-function-path my_loss.py:loss``) takes
Slime's helpers from here: ``get_log_probs_and_entropy``, ``compute_approx_kl`` and ``mpu``
(ooze/losses.py).
"""

import argparse

from .dynamic_filter import DynamicFilterOutput
from .function_path import load_function
from .generation import (AgentSession, agent_session, append_observation, generate,
                         remaining_budget, score, tokenizer)
from .rollout import DataSource, RolloutFnEvalOutput, RolloutFnTrainOutput
from .sample import Sample

# Replaced by the run's flags when ooze starts a hook.
args = argparse.Namespace()

# A custom loss's helpers import torch: loaded when a hook first asks for them, so that hooks
# without torch (rewards, filters) import ooze as fast as before.
_LOSS_HELPERS = ("get_log_probs_and_entropy", "compute_approx_kl", "bounded_log_ratio")


def __getattr__(name):
    if name in _LOSS_HELPERS:
        from . import losses

        return getattr(losses, name)
    raise AttributeError(f"module 'ooze' has no attribute '{name}'")


__all__ = [
    "Sample",
    "DynamicFilterOutput",
    "load_function",
    "args",
    "generate",
    "agent_session",
    "AgentSession",
    "append_observation",
    "remaining_budget",
    "score",
    "tokenizer",
    "DataSource",
    "RolloutFnTrainOutput",
    "RolloutFnEvalOutput",
    "mpu",
    *_LOSS_HELPERS,
]
