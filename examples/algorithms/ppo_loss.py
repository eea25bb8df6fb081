"""ooze's default policy loss, PPO clip, written as a custom loss: the starting point for a loss
of your own. With the same flags it trains exactly as the built-in one does (the tests hold its
loss and gradients to the built-in's within 1e-6):

    ooze train ... --loss-type custom_loss \
        --custom-loss-function-path examples/algorithms/ppo_loss.py:ppo_loss

It reads the flags of the built-in loss: --eps-clip, --eps-clip-high, --eps-clip-c (dual clip),
--entropy-coef, --use-kl-loss, --kl-loss-coef, --kl-loss-type and --use-unbiased-kl; and reports
the built-in's metrics (train/pg_loss, train/pg_clipfrac, train/ppo_kl, train/entropy_loss,
train/kl_loss). What it leaves out: --use-tis / mismatch metrics and --use-opsm.
"""

import torch

from ooze import bounded_log_ratio, compute_approx_kl, get_log_probs_and_entropy


def ppo_loss(args, batch, logits, sum_of_sample_mean):
    _, current = get_log_probs_and_entropy(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
        with_entropy=True,
    )
    log_probs = torch.cat(current["log_probs"])
    old_log_probs = torch.cat(batch["log_probs"])
    advantages = torch.cat(batch["advantages"])

    # max(-r A, -clip(r) A), with the clipped branch's choice made without a gradient: the values
    # and gradients of torch.maximum, without its slower backward.
    log_ratio = log_probs - old_log_probs
    ratio = bounded_log_ratio(log_ratio).exp()
    unclipped = -ratio * advantages
    high = args.eps_clip_high or args.eps_clip
    with torch.no_grad():
        clipped = -ratio.clamp(1 - args.eps_clip, 1 + high) * advantages
        chose_clipped = (clipped > unclipped).to(ratio.dtype)
    pg_per_token = unclipped + chose_clipped * (clipped - unclipped)
    if args.eps_clip_c:
        # Dual clip: for A < 0 the loss is capped at -c A, so an exploding ratio stays bounded.
        cap = -args.eps_clip_c * advantages
        with torch.no_grad():
            capped = ((advantages < 0) & (pg_per_token > cap)).to(ratio.dtype)
        pg_per_token = pg_per_token + capped * (cap - pg_per_token)

    pg_loss = sum_of_sample_mean(pg_per_token)
    entropy_loss = sum_of_sample_mean(torch.cat(current["entropy"]))
    loss = pg_loss
    if args.entropy_coef:
        loss = loss - args.entropy_coef * entropy_loss
    metrics = {
        "pg_loss": pg_loss.detach(),
        "pg_clipfrac": sum_of_sample_mean(chose_clipped),
        "ppo_kl": sum_of_sample_mean(-log_ratio.detach()),
        "entropy_loss": entropy_loss.detach(),
    }

    if args.use_kl_loss:
        # With a zero coefficient the KL is only a metric: no gradient through it.
        with_gradient = args.kl_loss_coef != 0
        kl_log_probs = log_probs if with_gradient else log_probs.detach()
        importance_ratio = None
        if args.use_unbiased_kl:
            importance_ratio = bounded_log_ratio(kl_log_probs - old_log_probs).exp()
        kl = compute_approx_kl(
            kl_log_probs,
            torch.cat(batch["ref_log_probs"]),
            kl_loss_type=args.kl_loss_type,
            importance_ratio=importance_ratio,
        )
        kl_loss = sum_of_sample_mean(kl)
        metrics["kl_loss"] = kl_loss.detach()
        if with_gradient:
            loss = loss + args.kl_loss_coef * kl_loss

    metrics["loss"] = loss.detach()
    return loss, metrics
