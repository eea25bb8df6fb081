"""Train-data hooks the launcher tests load, in Slime's signatures: conversions of a rollout's
samples into train data (--custom-convert-samples-to-train-data-path), each way one can be wrong,
and postprocessing of the train data (--rollout-data-postprocess-path)."""

import json
import os

import torch

from ooze import Sample


def _flat(samples):
    return [sample for group in samples for sample in group]


def default_conversion(args, samples):
    """What ooze trains on without the hook, Slime's default conversion written out."""
    flat = _flat(samples)
    return {
        "tokens": [sample.tokens for sample in flat],
        "response_lengths": [sample.response_length for sample in flat],
        "rewards": [sample.get_reward_value(args) for sample in flat],
        "raw_reward": [sample.get_reward_value(args) for sample in flat],
        "truncated": [int(sample.status == Sample.Status.TRUNCATED) for sample in flat],
        "sample_indices": [sample.index for sample in flat],
        "loss_masks": [sample.loss_mask for sample in flat],
        "rollout_log_probs": [sample.rollout_log_probs for sample in flat],
    }


def without_log_probs(args, samples):
    """The same without "rollout_log_probs", as tensors: ooze takes the samples' own."""
    data = default_conversion(args, samples)
    del data["rollout_log_probs"]
    data["tokens"] = [torch.tensor(tokens) for tokens in data["tokens"]]
    data["loss_masks"] = [torch.tensor(mask, dtype=torch.bool) for mask in data["loss_masks"]]
    data["rewards"] = torch.tensor(data["rewards"], dtype=torch.float64)
    data["metadata"] = [object() for _ in data["tokens"]]  # a key ooze does not read
    return data


def first_token_masked_reward_plus_one(args, samples):
    """Every response's first token out of the loss; each reward one more."""
    data = default_conversion(args, samples)
    data["loss_masks"] = [[0] + list(mask[1:]) for mask in data["loss_masks"]]
    data["rewards"] = [reward + 1.0 for reward in data["rewards"]]
    return data


def retokenized(args, samples):
    """Each sample with one more response token, and no rollout log-probs for it."""
    data = default_conversion(args, samples)
    del data["rollout_log_probs"]
    data["tokens"] = [tokens + [7] for tokens in data["tokens"]]
    data["response_lengths"] = [length + 1 for length in data["response_lengths"]]
    data["loss_masks"] = [mask + [1] for mask in data["loss_masks"]]
    return data


def _changed(key, change):
    def convert(args, samples):
        data = default_conversion(args, samples)
        change(data)
        return data

    convert.__name__ = key
    return convert


def _set(data, key, index, value):
    data[key][index] = value


not_a_dict = lambda args, samples: [1, 2, 3]  # noqa: E731
no_loss_masks = _changed("no_loss_masks", lambda data: data.pop("loss_masks"))
short_mask = _changed("short_mask", lambda data: _set(data, "loss_masks", 1, [1, 1]))
response_longer_than_tokens = _changed(
    "response_longer_than_tokens",
    lambda data: _set(data, "response_lengths", 0, len(data["tokens"][0])))
tokens_as_text = _changed("tokens_as_text", lambda data: _set(data, "tokens", 0, "1 2 3"))
reward_as_text = _changed("reward_as_text", lambda data: _set(data, "rewards", 2, "high"))
half_mask = _changed("half_mask", lambda data: _set(data, "loss_masks", 3, [1, 0.5, 1, 1]))
rewards_missing_one = _changed("rewards_missing_one", lambda data: data["rewards"].pop())
short_log_probs = _changed("short_log_probs",
                           lambda data: _set(data, "rollout_log_probs", 4, [-0.5]))


def _log(args, name, record):
    with open(os.path.join(args.output_dir, name), "a") as log:
        log.write(json.dumps(record) + "\n")


def logged_conversion(args, samples):
    """Each reward one more, and what it made of the samples in OUTPUT_DIR/converted.jsonl."""
    data = default_conversion(args, samples)
    data["rewards"] = [reward + 1.0 for reward in data["rewards"]]
    _log(args, "converted.jsonl", {"samples": len(data["tokens"]), "rewards": data["rewards"],
                                   "raw_rewards": data["raw_reward"]})
    return data


def _log_rollout_data(args, rollout_id, rollout_data):
    _log(args, "rollout_data.jsonl", {
        "rollout_id": rollout_id,
        "keys": sorted(rollout_data),
        "samples": len(rollout_data["tokens"]),
        "rewards": rollout_data["rewards"],
    })


def zero_odd_advantages(args, rollout_id, rollout_data):
    """Zeroes the advantages of the odd samples and takes sample 0's first token out of the loss,
    in place; writes what it was given to OUTPUT_DIR/rollout_data.jsonl."""
    for index, advantages in enumerate(rollout_data["advantages"]):
        if index % 2 == 1:
            advantages.mul_(0)
    rollout_data["loss_masks"][0][0] = 0
    _log_rollout_data(args, rollout_id, rollout_data)


def zero_advantages_in_odd_rollouts(args, rollout_id, rollout_data):
    """Every advantage of odd rollouts becomes 0, in place (so their pg_loss is 0); writes what it
    was given to OUTPUT_DIR/rollout_data.jsonl."""
    if rollout_id % 2 == 1:
        for advantages in rollout_data["advantages"]:
            advantages.zero_()
    _log_rollout_data(args, rollout_id, rollout_data)


def count_calls(args):
    """Slime's arity: appends a line to OUTPUT_DIR/postprocess_calls.txt."""
    with open(os.path.join(args.output_dir, "postprocess_calls.txt"), "a") as calls:
        calls.write("called\n")


def postprocess_raises(args, rollout_id, rollout_data):
    raise RuntimeError(f"cannot postprocess rollout {rollout_id}")


def two_arguments(args, rollout_id):
    pass
