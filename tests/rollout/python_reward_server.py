"""A remote reward model as Slime users write one, on Python's standard library only: an
independent HTTP/1.1 server that the remote_rm client of ooze must talk to.

POST any path with {"prompt", "response", "label"} -> {"score": 1.0 | 0.0, "prompt": prompt}.
Usage: python3 python_reward_server.py PORT
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RewardHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client asks

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if set(body) != {"prompt", "response", "label"}:
            self.send_error(400, "expected exactly prompt, response and label")
            return
        score = 1.0 if body["response"].strip() == body["label"] else 0.0
        answer = json.dumps({"score": score, "prompt": body["prompt"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), RewardHandler)
    print("listening", flush=True)
    server.serve_forever()
