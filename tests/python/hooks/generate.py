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
    sample.metadata["chat"] = ooze.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, chat_template="chatml")
    return sample


async def mixes_rollout_ids(args, sample, sampling_params):
    other = ooze.Sample(**{**sample.to_dict(), "status": sample.status})
    sample.rollout_id, other.rollout_id = 1, 2
    return [sample, other]


async def breaks_the_mask(args, sample, sampling_params):
    await ooze.generate(sample, 2)
    sample.loss_mask.append(1)
    return sample


async def split_in_two(args, sample, sampling_params):
    """Two training samples from one conversation: the first 2 tokens, then those and 2 more;
    each carries its own reward, which ooze keeps."""
    import copy

    await ooze.generate(sample, 2)
    second = copy.deepcopy(sample)
    await ooze.generate(second, 2)
    sample.reward, second.reward = 0.25, 0.75
    return [sample, second]
