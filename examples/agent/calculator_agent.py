"""A calculator agent, standard library only, that ooze trains through an agent session:

    ooze train ... --agent-command "python3 examples/agent/calculator_agent.py"

It is an ordinary program against the OpenAI completions API: ooze gives it OPENAI_BASE_URL
(its sample's session), OPENAI_API_KEY and, on stdin, the sample as one JSON line. It lets the
model write until it calls the calculator with <calc>EXPR</calc> (the request stops at
</calc>), answers the call with <result>VALUE</result> (examples/multi_turn/calculator.py), and
asks again with the conversation so far, until a turn makes no call. The session records the
exact tokens of every call: the model's become the trained tokens (loss mask 1), the
calculator's answers the observations between them (loss mask 0). The agent prints no reward
(the run's --rm-type scores the sample), only how many calls it answered, which the rollout
reports as rollout/calculator_calls.
"""

import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multi_turn"))
from calculator import CALL_CLOSE, find_tool_call, tool_answer  # noqa: E402

MAX_TURNS = 8
MAX_TOKENS_PER_TURN = 64


def complete(prompt: str) -> dict:
    body = {"model": "policy", "prompt": prompt, "max_tokens": MAX_TOKENS_PER_TURN,
            "stop": [CALL_CLOSE]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())["choices"][0]


def main():
    sample = json.loads(sys.stdin.readline())
    conversation = sample["prompt"]
    calls = 0
    for _ in range(MAX_TURNS):
        choice = complete(conversation)
        conversation += choice["text"]
        # The request stops at </calc> and leaves it out of the text; matched_stop says so.
        if choice["finish_reason"] != "stop" or choice.get("matched_stop") != CALL_CLOSE:
            break
        conversation += CALL_CLOSE
        expression = find_tool_call(conversation[conversation.rfind("<calc>"):])
        if expression is None:
            break
        conversation += tool_answer(expression)
        calls += 1
    print(json.dumps({"metrics": {"calculator_calls": calls}}))


main()
