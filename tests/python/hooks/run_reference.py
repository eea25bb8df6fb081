"""Plain python3's answer for `ooze reward`: imports FILE on its own, builds each input line's
Sample as `ooze reward` does, calls FUNCTION, and prints one JSON reward per line.

    python3 run_reference.py FILE FUNCTION LINES.jsonl [--group-rm] [--reward-key KEY]
"""

import argparse
import asyncio
import importlib.util
import inspect
import json
import sys

from ooze import Sample

parser = argparse.ArgumentParser()
parser.add_argument("file")
parser.add_argument("function")
parser.add_argument("lines")
parser.add_argument("--group-rm", action="store_true")
parser.add_argument("--reward-key", default="")
options = parser.parse_args()

spec = importlib.util.spec_from_file_location("reference_hooks", options.file)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
function = getattr(module, options.function)

samples = []
with open(options.lines, encoding="utf-8") as lines:
    for number, line in enumerate(lines):
        data = json.loads(line)
        samples.append(
            Sample(
                index=number,
                group_index=number,
                response=data["response"],
                label=data.get("label"),
                prompt=data.get("prompt", ""),
                metadata=data.get("metadata", {}),
                status=Sample.Status.COMPLETED,
            )
        )


def resolved(value):
    return asyncio.run(value) if inspect.isawaitable(value) else value


args = argparse.Namespace(reward_key=options.reward_key, group_rm=options.group_rm)
if options.group_rm:
    rewards = resolved(function(args, samples))
else:
    rewards = [resolved(function(args, sample)) for sample in samples]
for reward in rewards:
    print(json.dumps(float(reward) if isinstance(reward, bool) else reward))
