"""A curriculum as a data source (--data-source-path): the problems of --prompt-data served
easiest first (smallest sum), then round again, the position checkpointed with the run.

    ooze train ... --data-source-path examples/algorithms/curriculum.py:EasyFirst

Slime's DataSource contract: built as EasyFirst(args); get_samples(n) returns n groups of
--n-samples-per-prompt fresh samples (prompt text and label only: ooze tokenizes and numbers
them); save(rollout_id) writes the position under --save, load(rollout_id) reads it from --load.
"""

import json
import os

from ooze import DataSource, Sample


class EasyFirst(DataSource):
    def __init__(self, args):
        super().__init__(args)
        with open(args.prompt_data) as lines:
            records = [json.loads(line) for line in lines if line.strip()]
        self.records = sorted(records, key=lambda record: (int(record["label"]), record["input"]))
        self.position = 0

    def get_samples(self, num_samples):
        groups = []
        for _ in range(num_samples):
            record = self.records[self.position % len(self.records)]
            self.position += 1
            groups.append([Sample(prompt=record["input"], label=record["label"])
                           for _ in range(self.args.n_samples_per_prompt)])
        return groups

    def add_samples(self, samples):
        pass  # ooze keeps the groups a partial rollout left unfinished in its own buffer

    def save(self, rollout_id):
        with open(os.path.join(self.args.save, f"easy_first_{rollout_id}.json"), "w") as state:
            json.dump({"position": self.position}, state)

    def load(self, rollout_id=None):
        with open(os.path.join(self.args.load, f"easy_first_{rollout_id}.json")) as state:
            self.position = json.load(state)["position"]

    def __len__(self):
        return len(self.records)
