"""A test agent that uses only the standard library (urllib) against an ooze agent session.

    urllib_agent.py MODE TRANSCRIPT_PATH [SEED]

Reads the sample from stdin, talks to $OPENAI_BASE_URL with $OPENAI_API_KEY and writes what it
sent and got (every request body and response) to TRANSCRIPT_PATH as JSON. Modes:
    tools3     three chat turns with a calculator tool offered; each answer is followed by a
               tool message (the calculator's result), as a tool-using agent does
    reasoning  two turns with the Qwen3 template's thinking disabled
    completions  two calls to the completions API, sampled with SEED; the second prompt is the
               first prompt, the text the first call returned and " Go on."
    malformed  one request with an unknown role (refused), then one good turn
    garbage    prints lines that are not JSON, makes one good turn, prints a reward line
    crash      writes to stderr and exits 3 without calling the model
    crash_odd  crashes for samples of odd index; others make one turn and print no reward
    hang       sleeps for a minute
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]},
    },
}


def post(path, body):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + path, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def assistant_message(answer):
    message = answer["choices"][0]["message"]
    out = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    return out


def main():
    mode, transcript_path = sys.argv[1], sys.argv[2]
    sample = json.loads(sys.stdin.readline())
    calls = []
    if mode == "crash" or (mode == "crash_odd" and sample["index"] % 2 == 1):
        print("boom: the agent fell over", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":
        time.sleep(60)
    if mode == "garbage":
        print("this is not json {")
        print("[1, 2")
    if mode == "completions":
        prompt = sample["prompt"]
        for max_tokens in (24, 4):
            body = {"model": "policy", "prompt": prompt, "max_tokens": max_tokens,
                    "temperature": 1.0, "seed": int(sys.argv[3])}
            status, answer = post("/completions", body)
            calls.append({"status": status, "request": body, "response": answer})
            prompt += answer["choices"][0]["text"] + " Go on."
        with open(transcript_path, "w") as out:
            json.dump(calls, out)
        return
    messages = [{"role": "system", "content": "You can use a calculator."},
                {"role": "user", "content": sample["prompt"]}]
    if mode == "malformed":
        status, answer = post("/chat/completions",
                              {"model": "m", "messages": [{"role": "robot", "content": "hi"}]})
        calls.append({"status": status, "response": answer})
    turns = {"tools3": 3, "reasoning": 2}.get(mode, 1)
    for turn in range(turns):
        body = {"model": "policy", "messages": messages, "max_tokens": 6, "logprobs": True,
                "temperature": 0}
        if mode == "tools3":
            body["tools"] = [CALCULATOR]
        if mode == "reasoning":
            body["chat_template_kwargs"] = {"enable_thinking": False}
        status, answer = post("/chat/completions", body)
        calls.append({"status": status, "request": body, "response": answer})
        if status != 200:
            break
        messages = messages + [assistant_message(answer)]
        if mode == "tools3":
            calls_made = answer["choices"][0]["message"].get("tool_calls") or []
            call_id = calls_made[0]["id"] if calls_made else "call_none"
            messages.append({"role": "tool", "tool_call_id": call_id, "content": str(turn + 40)})
        else:
            messages.append({"role": "user", "content": "Are you sure?"})
    with open(transcript_path, "w") as out:
        json.dump(calls, out)
    if mode != "crash_odd":
        print(json.dumps({"reward": 0.25}))


main()
