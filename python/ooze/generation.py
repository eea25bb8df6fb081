"""What a generate function (--custom-generate-function-path) reaches the run's engines with.

    import ooze

    async def generate(args, sample, sampling_params):
        while True:
            text = await ooze.generate(sample)          # the policy's turn: mask 1
            call = find_tool_call(text)
            if call is None or ooze.remaining_budget(sample) == 0:
                return sample
            ooze.append_observation(sample, run_tool(call))  # the tool's answer: mask 0

`generate` sends the sample's tokens so far as token ids, with the run's sampling flags (the
request the built-in rollout sends), and appends the engine's tokens, log-probs and weight
versions to the sample; the tokens trained on are always those the engine sampled, never text
tokenized again. `tokenizer` is the run's tokenizer. `score` rewards samples with the run's
reward (--rm-type or --custom-rm-path), for rollout functions that score their own groups.

These work inside the functions ooze runs (generate and rollout functions, data sources);
elsewhere they raise RuntimeError.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from .sample import Sample, to_ooze_dict, update_from_ooze_dict

# The generation the running generate function belongs to (set by ooze for each call).
_generation = contextvars.ContextVar("ooze_generation", default=None)

# Engine requests block a thread each (in C++, without the GIL) while the event loop goes on.
_requests = ThreadPoolExecutor(max_workers=256, thread_name_prefix="ooze-generate")


def _native(name: str, payload):
    generation = _generation.get()
    if generation is None:
        raise RuntimeError(f"ooze.{name} works inside the functions ooze runs (generate and "
                           "rollout functions, data sources)")
    import _ooze_native

    return _ooze_native.call(f"{generation}/{name}", payload)


async def generate(sample: Sample, max_new_tokens: int = 0) -> str:
    """One turn of the policy: appends what the engine samples to `sample` (loss mask 1) and
    returns the turn's text. max_new_tokens <= 0: what is left of the response budget."""
    payload = {"sample": to_ooze_dict(sample), "max_new_tokens": max_new_tokens}
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    answer = await loop.run_in_executor(_requests, context.run, _native, "generate", payload)
    update_from_ooze_dict(sample, answer["sample"])
    return answer["text"]


def append_observation(sample: Sample, text: str) -> int:
    """Appends text the policy did not write (a tool's answer): its tokens get loss mask 0,
    log-prob 0 and weight version -1. Returns how many tokens were appended (cut to the budget)."""
    answer = _native("append_observation", {"sample": to_ooze_dict(sample), "text": text})
    update_from_ooze_dict(sample, answer["sample"])
    return answer["appended"]


async def score(samples: list) -> None:
    """Sets each sample's reward with the run's reward function, the samples scored together as
    one group (--group-rm functions see them all)."""
    payload = [to_ooze_dict(sample) for sample in samples]
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    rewards = await loop.run_in_executor(_requests, context.run, _native, "score", payload)
    for sample, reward in zip(samples, rewards):
        sample.reward = reward


def remaining_budget(sample: Sample) -> int:
    """Response tokens the sample may still grow by (--rollout-max-response-len minus its length)."""
    return _native("remaining_budget", {"sample": to_ooze_dict(sample)})


class AgentSession(NamedTuple):
    """A sample's OpenAI-compatible endpoint: give base_url and api_key to any OpenAI client."""

    base_url: str
    api_key: str


def agent_session() -> AgentSession:
    """The session of the sample being generated (opened on first use): an agent written
    against the OpenAI API runs against it unchanged, and the exact tokens of every call it makes
    become the sample when the generate function returns the sample without tokens of its own.

        async def generate(args, sample, sampling_params):
            session = ooze.agent_session()
            await asyncio.to_thread(run_my_agent, session.base_url, session.api_key, sample.prompt)
            return sample

    Blocking HTTP clients belong on a thread (asyncio.to_thread): the event loop runs every
    sample's generate function."""
    answer = _native("agent_session", None)
    return AgentSession(answer["base_url"], answer["api_key"])


class _Tokenizer:
    """The run's tokenizer, as Hugging Face's is called by Slime's generate functions."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        return _native("encode", text)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return _native("decode", list(ids))

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": self.encode(text)}

    def apply_chat_template(self, messages: list, tokenize: bool = False,
                            add_generation_prompt: bool = False, enable_thinking: bool = True,
                            chat_template: str = None, **kwargs):
        """The conversation rendered with a chat template ooze knows: `chat_template` names one
        ("chatml", "qwen3", "llama3", "llama3.1"; not Jinja text), else the run's --chat-template, else the
        tokenizer's own. Its text, or with tokenize=True its token ids."""
        import ooze

        text = _native("apply_chat_template", {
            "messages": list(messages),
            "add_generation_prompt": add_generation_prompt,
            "enable_thinking": enable_thinking,
            "chat_template": chat_template or getattr(ooze.args, "chat_template", "") or "",
        })
        return self.encode(text) if tokenize else text


tokenizer = _Tokenizer()
