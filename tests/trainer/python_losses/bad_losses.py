"""Losses that are wrong in each way ooze names."""

import torch

from ooze import get_log_probs_and_entropy

not_a_function = 3


def two_arguments(args, batch):
    return None


def _log_probs(logits):
    return torch.cat(get_log_probs_and_entropy(logits)[1]["log_probs"])


def raises(args, batch, logits, sum_of_sample_mean):
    raise ValueError("no loss today")


def wrong_reducer_input(args, batch, logits, sum_of_sample_mean):
    return sum_of_sample_mean(torch.ones(3)), {}


def not_a_tensor(args, batch, logits, sum_of_sample_mean):
    return 1.0, {}


def not_scalar(args, batch, logits, sum_of_sample_mean):
    return _log_probs(logits), {}


def detached(args, batch, logits, sum_of_sample_mean):
    return sum_of_sample_mean(_log_probs(logits)).detach(), {}


def loss_only(args, batch, logits, sum_of_sample_mean):
    return sum_of_sample_mean(_log_probs(logits))


def metrics_not_a_dict(args, batch, logits, sum_of_sample_mean):
    return sum_of_sample_mean(_log_probs(logits)), [1.0]


def metric_not_scalar(args, batch, logits, sum_of_sample_mean):
    log_probs = _log_probs(logits)
    return sum_of_sample_mean(log_probs), {"per_token": log_probs.detach()}


def logits_as_a_tensor(args, batch, logits, sum_of_sample_mean):
    return logits.log_softmax(-1).sum(), {}
