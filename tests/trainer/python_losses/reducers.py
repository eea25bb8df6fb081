"""pg_loss reducers (--custom-pg-loss-reducer-function-path) in Slime's form: each micro-batch's
factory call makes a reducer of the per-token pg_loss."""

import torch


def sample_means(total_lengths, response_lengths, loss_masks, calculate_per_token_loss=False):
    """Slime's own reduction: the sum of each sample's mean over its counted tokens (per token:
    the sum over counted tokens), which ooze divides by the step's samples (tokens)."""

    def reduce(x):
        parts = x.split(response_lengths)
        if calculate_per_token_loss:
            return sum((part * mask).sum() for part, mask in zip(parts, loss_masks))
        return sum(
            (part * mask).sum() / mask.sum().clamp(min=1) for part, mask in zip(parts, loss_masks)
        )

    return reduce


def sample_sums(total_lengths, response_lengths, loss_masks, calculate_per_token_loss=False):
    """Slime's Dr.GRPO example with a divisor of 1: each sample's sum over its counted tokens."""
    return lambda x: sum(
        (part * mask).sum() for part, mask in zip(x.split(response_lengths), loss_masks)
    )


def not_a_reducer(total_lengths, response_lengths, loss_masks, calculate_per_token_loss=False):
    return 3.0
