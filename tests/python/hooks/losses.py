"""Loss functions the loss-hook tests call with tensors ooze shares."""

import torch

from ooze import get_log_probs_and_entropy, mpu


def shares_tensors(args, batch, logits, sum_of_sample_mean):
    """Writes into a batch tensor (ooze must see it: nothing was copied) and returns a loss whose
    gradient flows into ooze's leaf."""
    batch["advantages"][0].add_(1.0)
    _, current = get_log_probs_and_entropy(logits, with_entropy=True)
    log_probs = torch.cat(current["log_probs"])
    loss = sum_of_sample_mean(log_probs * torch.cat(batch["advantages"]))
    return loss, {
        "samples": len(batch["response_lengths"]),
        "first_total_length": batch["total_lengths"][0],
        "answer": args.answer,
        "entropy_sum": torch.cat(current["entropy"]).sum(),
        "data_parallel_size": mpu.get_data_parallel_world_size(),
    }
