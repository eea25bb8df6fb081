"""How ooze's trainer runs a custom loss on each micro-batch; losses never import this.

The trainer hands over the micro-batch's tensors as torch tensors that share memory and autograd
with its own (no copy): the batch (Slime's keys, one tensor per sample), the current policy's
log-probs and entropy behind the ``logits`` handle, and the weight of every response token in the
step's objective, from which ``sum_of_sample_mean`` is made. What the loss returns is checked
here, where the Python types are still known, and comes back as (loss, metric names, metric
values); the trainer backpropagates the loss.
"""

from __future__ import annotations

import numbers

import torch

from . import _hook_runtime, mpu
from ._hook_runtime import HookError, _traceback
from .losses import Logits


class SumOfSampleMean:
    """``sum_of_sample_mean(x)``: x holds one value per response token of the micro-batch (the
    samples' values concatenated, as ``torch.cat(batch["advantages"])``); the result is this
    micro-batch's share of the step's mean of x under --loss-aggregation (by default the mean over
    samples of each sample's mean over its counted tokens). The counts are the whole step's, over
    every rank and micro-batch, so the shares add up to the step's value whatever the world size
    and the micro-batch split: what ooze's built-in losses reduce with.
    """

    __slots__ = ("weights",)

    def __init__(self, weights: torch.Tensor):
        self.weights = weights

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"sum_of_sample_mean takes a tensor, not a {type(x).__name__}")
        if x.shape != self.weights.shape:
            raise ValueError(
                f"sum_of_sample_mean takes one value per response token of the micro-batch "
                f"(shape ({self.weights.numel()},), the samples concatenated as "
                f"torch.cat(batch['advantages'])), got shape {tuple(x.shape)}"
            )
        if not x.is_floating_point():
            x = x.to(self.weights.dtype)
        weights = self.weights if x.dtype == self.weights.dtype else self.weights.to(x.dtype)
        return (x * weights).sum()


def _checked_loss(name: str, loss) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise HookError(
            f"{name} returned a loss of type {type(loss).__name__}: it must be a scalar "
            "torch.Tensor computed from the log-probs of get_log_probs_and_entropy"
        )
    if loss.numel() != 1 or not loss.is_floating_point():
        raise HookError(
            f"{name} returned a loss of shape {tuple(loss.shape)} and dtype {loss.dtype}: it "
            "must be a scalar floating-point tensor (reduce with sum_of_sample_mean)"
        )
    if not loss.requires_grad:
        raise HookError(
            f"{name} returned a loss without a gradient: it must be computed from the log-probs "
            "(or entropy) that get_log_probs_and_entropy(logits, ...) gives, not detached"
        )
    return loss.reshape(())


def _metric_value(name: str, key, value, device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise HookError(
                f"{name} returned metric {key!r} of shape {tuple(value.shape)}: a metric is a "
                "scalar (a tensor of one element or a number)"
            )
        return value.detach().reshape(()).to(device=device, dtype=torch.float64)
    if isinstance(value, numbers.Real):
        return torch.tensor(float(value), dtype=torch.float64, device=device)
    raise HookError(
        f"{name} returned metric {key!r} of type {type(value).__name__}: a metric is a scalar "
        "tensor or a number"
    )


def compute_loss(hook, batch: dict, log_probs: list, entropy: list, weights: torch.Tensor,
                 data_parallel_rank: int, data_parallel_size: int):
    """Runs ``hook(args, batch, logits, sum_of_sample_mean)`` on one micro-batch:
    (loss as a 0-dim tensor, metric names, their values as one float64 tensor on the loss's
    device). Metrics are summed over micro-batches and ranks, as the built-in losses' are, so a
    metric reduced with sum_of_sample_mean is the step's mean; "loss" is the loss unless the
    function reports its own."""
    mpu._set_data_parallel(data_parallel_rank, data_parallel_size)
    try:
        result = hook.function(_hook_runtime._args, batch, Logits(log_probs, entropy),
                               SumOfSampleMean(weights))
    except Exception as error:
        samples = f"{len(log_probs)} sample" + ("" if len(log_probs) == 1 else "s")
        raise HookError(
            f"{hook.name} raised on a micro-batch of {samples}:\n{_traceback(error)}"
        ) from None
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = f"{len(result)} values" if isinstance(result, (tuple, list)) else (
            f"a {type(result).__name__}")
        raise HookError(
            f"{hook.name} returned {got}: a loss function returns (loss, metrics), a scalar "
            "tensor and a dict of scalars"
        )
    loss, metrics = result
    loss = _checked_loss(hook.name, loss)
    if not isinstance(metrics, dict):
        raise HookError(
            f"{hook.name} returned metrics of type {type(metrics).__name__}: they must be a "
            "dict of name -> scalar tensor or number"
        )
    names, values = [], []
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise HookError(f"{hook.name} returned a metric named {key!r}: names are strings")
        names.append(key)
        values.append(_metric_value(hook.name, key, value, loss.device))
    if "loss" not in metrics:
        names.append("loss")
        values.append(loss.detach().to(torch.float64))
    return loss, names, torch.stack(values)


def reduce_pg_loss(hook, total_lengths: list, response_lengths: list, loss_masks: list,
                   calculate_per_token_loss: bool, x: torch.Tensor) -> torch.Tensor:
    """``hook(total_lengths, response_lengths, loss_masks, calculate_per_token_loss)(x)`` for one
    micro-batch's per-token pg_loss x (the samples' response tokens concatenated), as a 0-dim
    tensor."""
    try:
        reducer = hook.function(total_lengths, response_lengths, loss_masks,
                                calculate_per_token_loss)
        if not callable(reducer):
            raise HookError(
                f"{hook.name} returned a {type(reducer).__name__}: it makes the reducer, a "
                "function of the per-token pg_loss"
            )
        reduced = reducer(x)
    except HookError:
        raise
    except Exception as error:
        raise HookError(
            f"{hook.name} raised on a micro-batch of {len(response_lengths)} samples:\n"
            f"{_traceback(error)}"
        ) from None
    if not isinstance(reduced, torch.Tensor) or reduced.numel() != 1:
        shape = (f"a tensor of shape {tuple(reduced.shape)}" if isinstance(reduced, torch.Tensor)
                 else f"a {type(reduced).__name__}")
        raise HookError(
            f"{hook.name}: its reducer returned {shape}; it must reduce the per-token pg_loss to "
            "a scalar tensor"
        )
    if x.requires_grad and not reduced.requires_grad:
        raise HookError(
            f"{hook.name}: its reducer returned a pg_loss without a gradient: it must be computed "
            "from the tensor it is given"
        )
    return reduced.reshape(())


def _described(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__name__}"


def apply_tis(hook, pg_loss: torch.Tensor, train_log_probs: list, rollout_log_probs: list,
              loss_masks: list, total_lengths: list, response_lengths: list):
    """``hook(args=..., pg_loss=..., ...)``, every argument by keyword as Slime passes them, on one
    micro-batch's per-token pg_loss (the samples' response tokens concatenated): (pg_loss, the
    loss masks as float32, metric names, their per-token values detached), checked."""
    shape = tuple(pg_loss.shape)
    try:
        result = hook.function(args=_hook_runtime._args, pg_loss=pg_loss,
                               train_log_probs=train_log_probs,
                               rollout_log_probs=rollout_log_probs, loss_masks=loss_masks,
                               total_lengths=total_lengths, response_lengths=response_lengths)
    except Exception as error:
        samples = f"{len(response_lengths)} sample" + ("" if len(response_lengths) == 1 else "s")
        raise HookError(
            f"{hook.name} raised on a micro-batch of {samples}:\n{_traceback(error)}"
        ) from None
    expected = (
        "a TIS function returns (pg_loss, loss_masks, metrics): the per-token pg_loss it was "
        f"given, reweighted (a floating tensor of shape {shape}), one loss mask per sample (a "
        "tensor of shape (response_lengths[i],)) and a dict of per-token metrics"
    )
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        got = f"{len(result)} values" if isinstance(result, (tuple, list)) else _described(result)
        raise HookError(f"{hook.name} returned {got}: {expected}")
    corrected, masks, metrics = result
    if (not isinstance(corrected, torch.Tensor) or tuple(corrected.shape) != shape
            or not corrected.is_floating_point()):
        raise HookError(f"{hook.name} returned a pg_loss that is {_described(corrected)}: {expected}")
    if pg_loss.requires_grad and not corrected.requires_grad:
        raise HookError(
            f"{hook.name} returned a pg_loss without a gradient: it must be computed from the "
            "pg_loss it is given (pg_loss * weights), not detached"
        )
    if not isinstance(masks, (tuple, list)) or len(masks) != len(response_lengths):
        got = f"{len(masks)} loss masks" if isinstance(masks, (tuple, list)) else (
            f"loss masks that are {_described(masks)}")
        raise HookError(f"{hook.name} returned {got} for {len(response_lengths)} samples: {expected}")
    for index, (mask, length) in enumerate(zip(masks, response_lengths)):
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (length,):
            raise HookError(
                f"{hook.name} returned loss_masks[{index}] that is {_described(mask)}; sample "
                f"{index} has {length} response tokens: {expected}"
            )
    if not isinstance(metrics, dict):
        raise HookError(f"{hook.name} returned metrics that are {_described(metrics)}: {expected}")
    names, values = [], []
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise HookError(f"{hook.name} returned a metric named {key!r}: names are strings")
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            raise HookError(
                f"{hook.name} returned metric {key!r} that is {_described(value)}: a TIS metric "
                f"holds one value per response token of the micro-batch (shape {shape}), "
                "averaged over the step as the built-in tis metrics are"
            )
        names.append(key)
        values.append(value.detach().to(corrected.dtype))
    return corrected, [mask.to(torch.float32) for mask in masks], names, values
