"""What a custom loss (``--loss-type custom_loss --custom-loss-function-path PATH``) imports, with
Slime's names, so that a Slime loss ports by changing its imports:

    from ooze import compute_approx_kl, get_log_probs_and_entropy, mpu

    def my_loss(args, batch, logits, sum_of_sample_mean):
        _, current = get_log_probs_and_entropy(
            logits, args=args, unconcat_tokens=batch["unconcat_tokens"],
            total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"],
            with_entropy=True)
        log_probs = torch.cat(current["log_probs"])
        ...
        return loss, {"loss": loss.detach(), "pg_loss": pg_loss.detach()}

ooze never holds a micro-batch's logits ([T, V] does not fit for long samples): the trainer
computes the log-prob and the entropy of each response token chunk by chunk, with their
gradient, and ``logits`` is a handle on them that get_log_probs_and_entropy opens.
"""

from __future__ import annotations

import torch

# Log-ratios are clamped to this in value before exp (algorithms/log_ratio.h).
MAX_LOG_RATIO = 20.0
_LOW_VAR_KL_BOUND = 10.0


class Logits:
    """Stands for the policy's logits of one micro-batch: pass it to get_log_probs_and_entropy.

    ``logits.sum()`` is a scalar on the autograd graph of the micro-batch (the sum of its
    response tokens' log-probs), so Slime's ``loss + 0 * logits.sum()`` still works; nothing
    else of a tensor is there.
    """

    __slots__ = ("_log_probs", "_entropy")

    def __init__(self, log_probs: list, entropy: list):
        self._log_probs = log_probs
        self._entropy = entropy

    def sum(self) -> torch.Tensor:
        return torch.cat(self._log_probs).sum()

    def __getattr__(self, name):
        raise AttributeError(
            f"ooze never materialises the logits, so they have no '{name}': "
            "ooze.get_log_probs_and_entropy(logits, ...) gives the response tokens' log-probs "
            "and entropy"
        )

    def __repr__(self) -> str:
        return f"<ooze logits of {len(self._log_probs)} samples>"


def get_log_probs_and_entropy(
    logits: Logits,
    *,
    args=None,
    unconcat_tokens=None,
    total_lengths=None,
    response_lengths=None,
    with_entropy: bool = False,
    max_seq_lens=None,
    **ignored,
):
    """Slime's helper: ``(torch.empty(0), {"log_probs": [...], "entropy": [...]})``, one [R_i]
    tensor per sample of the micro-batch, in the batch's order, at the rollouts' temperature
    (--rollout-temperature), in fp32, carrying the gradient to the model. "entropy" only with
    ``with_entropy``; it carries a gradient when --entropy-coef is not 0.

    The other arguments are Slime's; ooze has already aligned the log-probs to the response
    tokens, so they are only checked against the micro-batch when given.
    """
    if not isinstance(logits, Logits):
        raise TypeError(
            f"get_log_probs_and_entropy takes the `logits` ooze passed the loss, not a "
            f"{type(logits).__name__}"
        )
    if response_lengths is not None:
        have = [int(x.numel()) for x in logits._log_probs]
        if [int(r) for r in response_lengths] != have:
            raise ValueError(
                f"response_lengths {list(response_lengths)} are not those of this micro-batch "
                f"({have}): pass batch['response_lengths']"
            )
    out = {"log_probs": list(logits._log_probs)}
    if with_entropy:
        out["entropy"] = list(logits._entropy)
    return torch.empty(0, device=logits._log_probs[0].device), out


def _compute_dtype(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def bounded_log_ratio(log_ratio: torch.Tensor) -> torch.Tensor:
    """``log_ratio`` clamped to [-20, 20] in value, with the gradient passing straight through:
    what ooze's built-in losses exponentiate, so that a diverged token cannot overflow."""
    with torch.no_grad():
        overshoot = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO) - log_ratio
    return log_ratio + overshoot


def compute_approx_kl(
    log_probs: torch.Tensor,
    log_probs_base: torch.Tensor,
    kl_loss_type: str,
    importance_ratio: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(pi || pi_base) estimates, as ooze's --kl-loss-type computes them (Slime's):
    with x = log pi - log pi_base, k1 = x, k2 = x^2 / 2, k3 = exp(-x) - 1 + x, and low_var_kl = k3
    clamped to [-10, 10] (after the importance ratio, for unbiased KL)."""
    if log_probs.shape != log_probs_base.shape:
        raise ValueError(
            f"compute_approx_kl: log_probs {tuple(log_probs.shape)} and log_probs_base "
            f"{tuple(log_probs_base.shape)} differ in shape"
        )
    log_ratio = _compute_dtype(log_probs) - _compute_dtype(log_probs_base)
    if kl_loss_type == "k1":
        kl = log_ratio
    elif kl_loss_type == "k2":
        kl = log_ratio.square() * 0.5
    elif kl_loss_type in ("k3", "low_var_kl"):
        reverse = bounded_log_ratio(-log_ratio)
        kl = reverse.exp() - 1.0 - reverse
    else:
        raise ValueError(f"kl_loss_type {kl_loss_type!r} is not k1, k2, k3 or low_var_kl")
    if importance_ratio is not None:
        kl = _compute_dtype(importance_ratio) * kl
    if kl_loss_type == "low_var_kl":
        kl = kl.clamp(-_LOW_VAR_KL_BOUND, _LOW_VAR_KL_BOUND)
    return kl
