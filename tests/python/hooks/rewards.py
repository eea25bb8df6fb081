"""Reward functions the Python-hook tests load into ooze, and run under plain python3 alike
(run_reference.py): what ooze returns must be what Python returns."""

import asyncio
import random
import time

from ooze import Sample


def _words(text):
    # str.lower() and str.split() follow Unicode: ZÜRICH and Zürich are one word.
    return text.lower().split()


def token_f1(args, sample):
    """Sync: the F1 of the response's words against the label's."""
    predicted, gold = _words(sample.response), _words(sample.label or "")
    common = sum(min(predicted.count(word), gold.count(word)) for word in set(predicted))
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


async def graded(args, sample):
    """Async, an object reward: its --reward-key field is the score."""
    await asyncio.sleep(0.001 * (sample.index % 3))
    digits = [int(character) for character in sample.response if character.isdecimal()]
    right = bool(digits) and sum(digits) == len(sample.label or "")
    return {args.reward_key: float(right), "digits": len(digits), "status": sample.status.value}


def rank_by_length(args, samples):
    """Batched (--group-rm): each sample's rank by response length within the batch."""
    order = sorted(range(len(samples)), key=lambda i: (len(samples[i].response), i))
    ranks = [0] * len(samples)
    for rank, i in enumerate(order):
        ranks[i] = rank / max(1, len(samples) - 1)
    return ranks


async def sleepy(args, sample):
    await asyncio.sleep(0.2)
    return 1.0


def sleepy_sync(args, sample):
    time.sleep(0.2)
    return 1.0


async def shuffled_index(args, sample):
    """Finishes in a random order: rewards must still come back in the samples' order."""
    await asyncio.sleep(random.random() * 0.05)
    return sample.index


def flags(args, sample):
    return float(args.n_samples_per_prompt)


def chatty(args, sample):
    print(f"scoring sample {sample.index}")
    return 0.5


def is_completed(args, sample):
    return sample.status == Sample.Status.COMPLETED


def returns_str(args, sample):
    return "0.5"


def returns_nan(args, sample):
    return float("nan")


def raises_on_third(args, sample):
    if sample.index == 2:
        raise ValueError(f"cannot grade {sample.response!r}")
    return 1.0


async def raises_async(args, sample):
    raise RuntimeError("the judge is down")


def wrong_length(args, samples):
    return [1.0]


def one_argument(sample):
    return 0.0


not_a_function = 3


def first_token_parity(args, sample):
    """The parity of the response's first token id (what the C++ test plugin of the same name
    computes): rewards that vary between samples, so dynamic sampling has groups to drop."""
    return float(sample.tokens[len(sample.tokens) - sample.response_length] % 2)


def fails_in_fourth_rollout(args, sample):
    """Rollouts of 4 samples: the fourth (samples 12 to 15) cannot be scored."""
    if sample.index >= 12:
        raise RuntimeError(f"the judge crashed on sample {sample.index}")
    return float(sample.response_length % 2)


def sleeps_a_minute(args, sample):
    time.sleep(60)
    return 1.0


async def hangs_async(args, sample):
    await asyncio.sleep(3600)
    return 1.0


def teacher_total(args, sample):
    """The sum of the teacher's log-probs; -1 when no teacher scored the sample (None, as Slime)."""
    if sample.teacher_log_probs is None:
        return -1.0
    return float(sum(sample.teacher_log_probs))
