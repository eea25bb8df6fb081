"""DAPO's dynamic sampling as a Python filter: a group whose rewards all agree (all right or all
wrong) has zero advantages and teaches nothing, so it is dropped and more prompts are drawn.

    ooze train ... --over-sampling-batch-size 24 \
        --dynamic-sampling-filter-path examples/algorithms/dapo_filter.py:check_reward_nonzero_std

The signature is Slime's: (args, samples) -> DynamicFilterOutput (or a bool). The reason of a
dropped group is counted in the rollout's metrics (rollout/dynamic_filter/drop_<reason>).
"""

from ooze import DynamicFilterOutput


def check_reward_nonzero_std(args, samples, **kwargs):
    rewards = [sample.get_reward_value(args) for sample in samples]
    if max(rewards) > min(rewards):
        return DynamicFilterOutput(keep=True)
    return DynamicFilterOutput(keep=False, reason=f"zero_std_{round(rewards[0], 1)}")
