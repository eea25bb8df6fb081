"""A multi-turn generate function with a calculator tool, in Python: the twin of
calculator_generate.cpp, loaded with

    ooze train ... --custom-generate-function-path \
        examples/multi_turn/calculator_generate.py:calculator_generate --rollout-stop '</calc>'

The policy calls the tool by writing <calc>EXPR</calc>, EXPR being integers, + - * /, unary
minus and parentheses. Each turn, the function lets the policy write until it stops, finds the
call in what it wrote since the last tool answer, and appends the answer as an observation:
    <result>14</result>          exact: 7/2 answers 7/2, not 3 or 3.5
    <result>error: division by zero</result>
Observations are not the policy's tokens: ooze.append_observation gives them loss mask 0, so the
trainer does not learn to write them. The sample ends when a turn makes no call, when it is
aborted, or when its response budget (--rollout-max-response-len) is spent. sample.metrics gets
"turns" and "tool_calls", which the rollout reports as rollout/turns and rollout/tool_calls.
"""

import ooze
from calculator import CALL_CLOSE, find_tool_call, tool_answer
from ooze import Sample

# Tokens one policy turn may write: a turn that rambles this long without a call ends the sample.
MAX_TOKENS_PER_TURN = 512


def policy_text_since_last_observation(sample: Sample) -> str:
    """What the policy wrote since the last observation, spelled from its tokens (with
    --rollout-stop '</calc>' the engine's text ends before the stop string; the tokens do not)."""
    start = len(sample.loss_mask)
    while start > 0 and sample.loss_mask[start - 1] != 0:
        start -= 1
    response = sample.tokens[len(sample.tokens) - len(sample.loss_mask):]
    return ooze.tokenizer.decode(response[start:])


async def calculator_generate(args, sample: Sample, sampling_params) -> Sample:
    # A sample continued from a partial rollout keeps counting where it stopped.
    turns = sample.metrics.get("turns", 0)
    tool_calls = sample.metrics.get("tool_calls", 0)
    finishing_a_turn = bool(sample.loss_mask) and sample.loss_mask[-1] == 1
    while ooze.remaining_budget(sample) > 0:
        length_before = sample.response_length
        await ooze.generate(sample, MAX_TOKENS_PER_TURN)
        if sample.response_length > length_before and not finishing_a_turn:
            turns += 1
        finishing_a_turn = False
        if sample.status == Sample.Status.ABORTED:
            break
        written = policy_text_since_last_observation(sample)
        expression = find_tool_call(written)
        if expression is None:
            break
        # Put the stop string the engine cut from the text back, so the response spells its tokens.
        if written.endswith(CALL_CLOSE) and not sample.response.endswith(CALL_CLOSE):
            sample.response += CALL_CLOSE
        if ooze.remaining_budget(sample) == 0:
            break
        ooze.append_observation(sample, tool_answer(expression))
        tool_calls += 1
    sample.metrics["turns"] = turns
    sample.metrics["tool_calls"] = tool_calls
    return sample
