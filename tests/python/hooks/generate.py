"""Generate functions the Python-hook rollout tests load (Slime's signature)."""

import ooze

OBSERVATION = "<result>42</result>"


async def turn_tool_turn(args, sample, sampling_params):
    """A policy turn of 3 tokens, a tool's answer, and a second turn: whatever the tiny model
    writes, the answer is there to check (loss mask 0) between two turns of the engine's own."""
    await ooze.generate(sample, 3)
    sample.metrics["first_turn"] = sample.response_length
    sample.metrics["observation"] = ooze.append_observation(sample, OBSERVATION)
    await ooze.generate(sample, 3)
    sample.metrics["encoded"] = len(ooze.tokenizer.encode(OBSERVATION))
    return sample


async def returns_two(args, sample, sampling_params):
    return [sample, sample]


async def breaks_the_mask(args, sample, sampling_params):
    await ooze.generate(sample, 2)
    sample.loss_mask.append(1)
    return sample
