"""TIS functions (--custom-tis-function-path) in Slime's form, every argument by keyword: the
built-in token-level clip TIS written again, one that rejects tokens, and each way one can be
wrong."""

import torch

# |old - rollout| beyond which reject_far_tokens rejects a token (the tests apply it too).
REJECT_BEYOND = 0.2


def token_clip_tis(args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, **kwargs):
    """Truncated importance sampling per token: pg_loss * clamp(pi_old / pi_rollout, low, high),
    with the built-in's metrics that are per-token means."""
    difference = torch.cat(train_log_probs) - torch.cat(rollout_log_probs)
    bounded = difference.clamp(-20.0, 20.0)
    ratio = torch.exp(bounded)
    weights = torch.clamp(ratio, min=args.tis_clip_low, max=args.tis_clip)
    metrics = {
        "tis": ratio,
        "tis_abs": (ratio - 1.0).abs(),
        "tis_clipfrac": (weights != ratio).float(),
        "train_rollout_logprob_abs_diff": difference.abs(),
        "train_rollout_k3_kl": torch.exp(bounded) - 1.0 - bounded,
    }
    return pg_loss * weights, loss_masks, metrics


def reject_far_tokens(args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks,
                      total_lengths, response_lengths):
    """Rejection without reweighting: a token whose old and rollout log-probs are further apart
    than REJECT_BEYOND leaves the loss."""
    masks = [
        mask * ((old - rollout).abs() <= REJECT_BEYOND)
        for old, rollout, mask in zip(train_log_probs, rollout_log_probs, loss_masks)
    ]
    rejected = torch.cat([mask - kept for mask, kept in zip(loss_masks, masks)])
    return pg_loss, masks, {"rejected": rejected}


def positional(args, pg_loss):
    return pg_loss, [], {}


def raises(args, **kwargs):
    raise ValueError("no correction today")


def two_values(args, *, pg_loss, loss_masks, **kwargs):
    return pg_loss, loss_masks


def not_a_tensor(args, *, pg_loss, loss_masks, **kwargs):
    return 1.0, loss_masks, {}


def wrong_shape(args, *, pg_loss, loss_masks, **kwargs):
    return pg_loss[1:], loss_masks, {}


def detached(args, *, pg_loss, loss_masks, **kwargs):
    return pg_loss.detach(), loss_masks, {}


def short_mask(args, *, pg_loss, loss_masks, **kwargs):
    return pg_loss, [mask[1:] for mask in loss_masks], {}


def scalar_metric(args, *, pg_loss, loss_masks, **kwargs):
    return pg_loss, loss_masks, {"mean_weight": torch.tensor(1.0)}
