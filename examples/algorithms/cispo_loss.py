"""CISPO (MiniMax-M1, arXiv:2506.13585) as a custom loss, in the form of Slime's
examples/cispo: REINFORCE on log pi, each token weighted by its importance ratio clipped and
detached, so that tokens outside the trust region still get a gradient (PPO's clip drops them):

    L = -sum_of_sample_mean( sg(clip(r, 1 - eps_clip, 1 + eps_clip_high)) * A * log pi )

    ooze train ... --loss-type custom_loss \
        --custom-loss-function-path examples/algorithms/cispo_loss.py:cispo_loss \
        --eps-clip-high 4.0

It is ooze's built-in CISPO (--advantage-estimator cispo) in Python, and trains exactly as it
does (the tests hold the two to 1e-6). One difference from Slime's example: there
--eps-clip-high is the ratio's upper bound itself; here, as everywhere in ooze and for PPO, the
bound is 1 + --eps-clip-high (the lower one 1 - --eps-clip; --eps-clip 1 turns it off).
From Slime, a port changes its imports only: megatron's mpu and Slime's helpers come from ooze.
"""

from argparse import Namespace
from collections.abc import Callable

import torch

from ooze import bounded_log_ratio, compute_approx_kl, get_log_probs_and_entropy, mpu


def cispo_loss(
    args: Namespace,
    batch: dict,
    logits,
    sum_of_sample_mean: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if not mpu.is_pipeline_last_stage():  # always the last stage in ooze; kept from Slime's
        dummy = 0 * logits.sum()
        return dummy, {"loss": dummy.detach()}

    advantages = torch.cat(batch["advantages"], dim=0)
    # With --use-rollout-logprobs ooze's batch["log_probs"] already are the rollout's.
    old_log_probs = batch["rollout_log_probs"] if args.use_rollout_logprobs else batch["log_probs"]
    old_log_probs = torch.cat(old_log_probs, dim=0)

    _, current = get_log_probs_and_entropy(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
        with_entropy=True,
    )
    log_probs = torch.cat(current["log_probs"], dim=0)

    # The ratio pi / pi_old is a weight, not a path for the gradient.
    ratio = bounded_log_ratio(log_probs.detach() - old_log_probs).exp()
    weight = ratio.clamp(1 - args.eps_clip, 1 + (args.eps_clip_high or args.eps_clip))
    pg_loss = sum_of_sample_mean(-weight * advantages * log_probs)
    pg_clipfrac = sum_of_sample_mean((weight != ratio).float())
    ppo_kl = sum_of_sample_mean((old_log_probs - log_probs).detach())

    entropy_loss = sum_of_sample_mean(torch.cat(current["entropy"], dim=0))
    loss = pg_loss - args.entropy_coef * entropy_loss if args.entropy_coef else pg_loss

    reported = {
        "pg_loss": pg_loss.detach(),
        "entropy_loss": entropy_loss.detach(),
        "pg_clipfrac": pg_clipfrac,
        "ppo_kl": ppo_kl,
        "is_ratio_mean": sum_of_sample_mean(ratio),
    }
    if args.use_kl_loss:
        kl_log_probs = log_probs if args.kl_loss_coef else log_probs.detach()
        kl = compute_approx_kl(
            kl_log_probs, torch.cat(batch["ref_log_probs"], dim=0), kl_loss_type=args.kl_loss_type
        )
        kl_loss = sum_of_sample_mean(kl)
        reported["kl_loss"] = kl_loss.detach()
        if args.kl_loss_coef:
            loss = loss + args.kl_loss_coef * kl_loss

    reported["loss"] = loss.detach()
    return loss, reported
