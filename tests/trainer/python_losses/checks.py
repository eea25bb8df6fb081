"""Losses the Python-loss tests run in the train step: metrics of their own, the parallel layout,
Slime's idioms, and a torch.autograd.Function whose backward is Python (run by the C++ step's
backward, which must not hold the GIL)."""

import torch

from ooze import get_log_probs_and_entropy, mpu


def _log_probs(logits, batch):
    _, current = get_log_probs_and_entropy(
        logits, response_lengths=batch["response_lengths"], with_entropy=False
    )
    return torch.cat(current["log_probs"])


def with_metrics(args, batch, logits, sum_of_sample_mean):
    """The SFT loss (-mean log-prob), with metrics whose step values the test knows."""
    log_probs = _log_probs(logits, batch)
    loss = sum_of_sample_mean(-log_probs) + 0 * logits.sum()
    return loss, {
        "share_of_ones": sum_of_sample_mean(torch.ones_like(log_probs)),
        "micro_batches": 1,
        "counted_tokens": float(torch.cat(batch["loss_masks"]).sum()),
        "data_parallel_rank": float(mpu.get_data_parallel_rank()),
        "data_parallel_size": torch.tensor(float(mpu.get_data_parallel_world_size())),
        "last_stage": mpu.is_pipeline_last_stage() and mpu.get_context_parallel_world_size() == 1,
    }


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad.clone()


def through_python_function(args, batch, logits, sum_of_sample_mean):
    """The SFT loss through an autograd.Function: its backward runs in Python."""
    log_probs = _Identity.apply(_log_probs(logits, batch))
    return sum_of_sample_mean(-log_probs), {}
