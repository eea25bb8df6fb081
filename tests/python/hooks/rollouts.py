"""Whole-rollout functions, a data source and an all-samples hook the rollout tests load."""

import asyncio
import json
import os

import ooze
from ooze import Sample


async def _generate_group(group):
    for sample in group:
        await ooze.generate(sample)
    await ooze.score(group)


def greedy_rollout(args, rollout_id, data_source, evaluation=False):
    """What ooze's own rollout does, written out: draw, generate every sample, score by group."""
    if evaluation:
        groups = data_source.get_samples(2)
        asyncio.run(_generate_all(groups))
        samples = [sample for group in groups for sample in group]
        return ooze.RolloutFnEvalOutput(
            data={"toy": {"rewards": [s.reward for s in samples],
                          "truncated": [s.status == Sample.Status.TRUNCATED for s in samples],
                          "samples": samples}},
            metrics={"eval/toy/calls": 1.0})
    groups = data_source.get_samples(args.rollout_batch_size)
    asyncio.run(_generate_all(groups))
    return ooze.RolloutFnTrainOutput(samples=groups, metrics={"rollout/python_groups": len(groups)})


async def _generate_all(groups):
    await asyncio.gather(*(_generate_group(group) for group in groups))


async def async_rollout(args, rollout_id, data_source, evaluation=False):
    """The same as an async def, returning the groups alone, unscored (ooze scores them)."""
    groups = data_source.get_samples(args.rollout_batch_size)
    await asyncio.gather(*(ooze.generate(s) for group in groups for s in group))
    return groups


def raises(args, rollout_id, data_source, evaluation=False):
    raise ValueError(f"no rollout {rollout_id} today")


def returns_text(args, rollout_id, data_source, evaluation=False):
    return "groups"


class CountingSource(ooze.DataSource):
    """Prompts "count to N" for N = 0, 1, ...; its position survives save and load."""

    def __init__(self, args):
        super().__init__(args)
        self.position = 0

    def get_samples(self, num_samples):
        groups = []
        for _ in range(num_samples):
            prompt = f"count to {self.position}"
            groups.append([Sample(prompt=prompt, label=str(self.position))
                           for _ in range(self.args.n_samples_per_prompt)])
            self.position += 1
        return groups

    def add_samples(self, samples):
        pass

    def save(self, rollout_id):
        with open(os.path.join(self.args.save, f"counting_source_{rollout_id}.json"), "w") as f:
            json.dump({"position": self.position}, f)

    def load(self, rollout_id=None):
        with open(os.path.join(self.args.load, f"counting_source_{rollout_id}.json")) as f:
            self.position = json.load(f)["position"]

    def __len__(self):
        return 1 << 30


class NotASource:
    def __init__(self, args):
        pass


def record_all_samples(args, samples, data_source):
    """Writes, for each group, its index and rewards to the file its samples' metadata names."""
    path = samples[0][0].metadata["record_to"]
    with open(path, "a") as f:
        for group in samples:
            f.write(json.dumps({"group_index": group[0].group_index,
                                "rewards": [s.reward for s in group]}) + "\n")


def keep_odd_groups(args, samples):
    return ooze.DynamicFilterOutput(keep=samples[0].group_index % 2 == 1, reason="even")


def _router_is_healthy(args):
    """Slime's functions post to args.sglang_router_ip:args.sglang_router_port themselves."""
    import urllib.request

    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/health"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status == 200


def train_rollout(args, rollout_id, data_source, evaluation=False):
    """greedy_rollout in ooze train, which also checks that the run's router answers over HTTP."""
    output = greedy_rollout(args, rollout_id, data_source, evaluation)
    if not evaluation:
        output.metrics["rollout/router_healthy"] = float(_router_is_healthy(args))
    return output


def log_eval_to_file(rollout_id, args, data, extra_metrics):
    with open(os.path.join(args.output_dir, "python_eval_log.jsonl"), "a") as log:
        log.write(json.dumps({"rollout_id": rollout_id,
                              "datasets": sorted(data),
                              "samples": len(data["toy"]["samples"]),
                              "eval_toy": extra_metrics["eval/toy"]}) + "\n")
    return False
