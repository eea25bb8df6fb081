"""An environment server for ooze's --env-url, in the OpenEnv style, standard library only: the
demo's addition task (examples/demo/make_task.sh) with second chances.

    python3 examples/env/env_server.py --port 8000 [--host 127.0.0.1] [--log episodes.jsonl]

    POST /reset  {"episode_id", "sample": {"prompt": "3+4=", "label": "7", ...}}
                 -> {"observation": "", "reward": null, "done": false}
                 (the sample's prompt already poses the problem)
    POST /step   {"episode_id", "action": {"text": "8"}}
                 -> {"observation": "\\nNo. 3+4=", "reward": -0.1, "done": false}
                 -> {"observation": "", "reward": 1.0, "done": true}       (the right sum)
    GET  /health -> 200

The first integer of an action is its answer. The right sum ends the episode with reward 1;
a wrong one costs 0.1 and asks again, up to MAX_ATTEMPTS answers. With --log every step is
appended as a JSON line {"episode_id", "action", "observation", "reward", "done"}.
"""

import argparse
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_ATTEMPTS = 3
WRONG_ANSWER_COST = 0.1


class Episodes:
    def __init__(self, log_path):
        self.lock = threading.Lock()
        self.episodes = {}
        self.log_path = log_path

    def reset(self, body):
        sample = body.get("sample") or {}
        episode = {"prompt": str(sample.get("prompt", "")), "label": str(sample.get("label", "")),
                   "attempts": 0}
        with self.lock:
            self.episodes[str(body.get("episode_id"))] = episode
        return {"observation": "", "reward": None, "done": False}

    def step(self, body):
        episode_id = str(body.get("episode_id"))
        text = (body.get("action") or {}).get("text")
        if not isinstance(text, str):
            raise ValueError('action.text must be a string')
        with self.lock:
            episode = self.episodes.get(episode_id)
            if episode is None:
                raise KeyError(f"no episode {episode_id!r}: POST /reset first")
            episode["attempts"] += 1
            answer = re.search(r"-?\d+", text)
            if answer and answer.group() == episode["label"].strip():
                result = {"observation": "", "reward": 1.0, "done": True}
            elif episode["attempts"] >= MAX_ATTEMPTS:
                result = {"observation": "", "reward": -WRONG_ANSWER_COST, "done": True}
            else:
                result = {"observation": "\nNo. " + episode["prompt"],
                          "reward": -WRONG_ANSWER_COST, "done": False}
            if result["done"]:
                del self.episodes[episode_id]
            if self.log_path:
                with open(self.log_path, "a") as log:
                    log.write(json.dumps({"episode_id": episode_id, "action": text, **result}) + "\n")
        return result


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, {"status": "ok"})
        else:
            self.answer(404, {"error": f"no such path: {self.path}"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/reset":
                self.answer(200, self.server.episodes.reset(body))
            elif self.path == "/step":
                self.answer(200, self.server.episodes.step(body))
            else:
                self.answer(404, {"error": f"no such path: {self.path}"})
        except (ValueError, KeyError) as error:
            self.answer(400, {"error": str(error)})

    def log_message(self, format, *args):
        pass  # one line per request would drown a rollout's log


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log", default="")
    options = parser.parse_args()
    server = ThreadingHTTPServer((options.host, options.port), Handler)
    server.episodes = Episodes(options.log)
    server.serve_forever()


main()
