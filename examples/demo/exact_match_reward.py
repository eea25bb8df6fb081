"""The demo's reward: 1 when the response, without surrounding whitespace, is exactly the label
(the sum), else 0. Loaded by

    ooze train --custom-rm-path examples/demo/exact_match_reward.py:exact_match ...

(examples/demo/exact_match_reward.cpp is the same reward as a C++ plugin, the fast path.)
"""


def exact_match(args, sample):
    return 1.0 if sample.response.strip() == (sample.label or "").strip() else 0.0


async def exact_match_async(args, sample):
    """The same reward as a coroutine (bench/python_reward_bench.cpp measures both forms)."""
    return exact_match(args, sample)
