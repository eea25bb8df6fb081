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


def _chat(session, messages):
    """One chat call to the sample's session with urllib (blocking: run it on a thread)."""
    import json
    import urllib.request

    request = urllib.request.Request(
        session.base_url + "/chat/completions",
        data=json.dumps({"model": "policy", "messages": messages, "max_tokens": 4,
                         "temperature": 0}).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Bearer " + session.api_key})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["choices"][0]["message"]


async def agent_via_session(args, sample, sampling_params):
    """An agent written against the OpenAI API, run on the sample's session: two turns with a
    user message between them; the sample comes back as it came, with a reward set."""
    import asyncio

    session = ooze.agent_session()
    assert ooze.agent_session() == session, "one session per generate call"
    messages = [{"role": "user", "content": sample.prompt}]
    first = await asyncio.to_thread(_chat, session, messages)
    messages += [{"role": "assistant", "content": first["content"]},
                 {"role": "user", "content": OBSERVATION}]
    await asyncio.to_thread(_chat, session, messages)
    sample.reward = 0.75
    sample.metadata["base_url"] = session.base_url
    return sample
