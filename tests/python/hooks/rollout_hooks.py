"""Whole-rollout hooks the ooze train tests load (Slime's signatures)."""

import json
import os


def remove_odd_samples(args, groups):
    for group in groups:
        for sample in group:
            sample.remove_sample = sample.index % 2 == 1


def zero_rewards(args, samples):
    """Every advantage becomes 0, so the policy loss is exactly 0."""
    raw = [sample.get_reward_value(args) for sample in samples]
    return raw, [0.0] * len(samples)


def log_to_file(rollout_id, args, samples, rollout_extra_metrics, rollout_time):
    """Writes what it was given to OUTPUT_DIR/python_rollout_log.jsonl; takes the metrics of
    odd rollouts over (returns True)."""
    with open(os.path.join(args.output_dir, "python_rollout_log.jsonl"), "a") as log:
        log.write(json.dumps({
            "rollout_id": rollout_id,
            "samples": len(samples),
            "indices": sorted(sample.index for sample in samples),
            "raw_reward": rollout_extra_metrics["rollout/raw_reward"],
            "rollout_time": rollout_time,
        }) + "\n")
    return rollout_id % 2 == 1


def post_process_wrong_length(args, samples):
    return [0.0], [0.0]
