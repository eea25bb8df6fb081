// `ooze train`: the RL loop, with Slime's flags.
//
//   ooze train --hf-checkpoint DIR --prompt-data train.jsonl --rm-type math --output-dir OUT
//              [--actor-num-gpus-per-node 2] [--rollout-num-gpus 2] [--colocate]
//              [--num-rollout 10] [--global-batch-size 16] [any rollout, algorithm, optimizer,
//              weight-sync flag]
//
// Per rollout id, read top to bottom in run_train_command:
//   1. generate   the rollout manager over the engines (HTTP servers inside RolloutEngine
//                 actors, reached through the router), rewards, filters;
//   2. score      old log-probs recomputed by the trainer (or the rollout's, with
//                 --use-rollout-logprobs), reference log-probs when a KL needs them;
//   3. advantages over the whole rollout (launcher/training_batch.h);
//   4. train      --global-batch-size samples per optimizer step, dealt over the trainer ranks;
//   5. sync       the new weights to every engine as version rollout_id + 1;
//   6. log        one line of metrics (Slime's keys) to stdout, OUT/metrics.jsonl and
//                 TensorBoard event files in OUT/tensorboard.
// The effective config is saved as OUT/config.json before anything starts. On one machine the
// actor runtime is embedded; a "GPU" of the placement flags is a process slot on the CPU.
//
// --save DIR checkpoints every --save-interval rollouts and after the last; --load DIR resumes
// (the trainer's state, the rollout id, the prompt source; the engines get the loaded weights
// first). Slime's debug modes: --save-debug-rollout-data, --load-debug-rollout-data (train on
// saved samples, no engine), --debug-rollout-only (no trainer), --debug-train-only.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ooze::launcher {

// `args` are the arguments after "train". Returns the exit code; throws ConfigError for bad
// flags and the errors of the modules it runs.
int run_train_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace ooze::launcher
