#!/usr/bin/env bash
# A GRPO run with this directory's reward plugin, on a task the CPU demo's tiny model can learn:
#   1. the plugin built as a user builds it: ooze's plugin files installed from BUILD_DIR into
#      OUT/sdk, this directory configured against that prefix alone and built in OUT/plugin;
#   2. single-digit addition answered as "<think>a+b</think> \boxed{sum}" (make_task.sh) and a
#      supervised warm start of a tiny Qwen3 on demonstrations that are right 40% of the time
#      and well formed half of the time;
#   3. GRPO on the plugin's reward, math_with_format_bonus with --reward-key score: 1 for the
#      right boxed sum, plus 0.1 when the reasoning is closed by </think> before one boxed
#      answer. eval/add is the mean score over the 100 problems (at most 1.1).
#
#   examples/reward_plugin/run.sh [more ooze train flags]
# The flags given are passed last, so they win over the blocks below.
# Environment: OUT (runs/reward_plugin), BUILD_DIR (build), NUM_ROLLOUT (100), EVAL_INTERVAL
# (50), SEED (1), SFT_STEPS (160), WARM_START (a warm-start model directory from an earlier
# run's OUT/sft/model; empty: make one), PLUGIN (an already built libmath_format_reward.so;
# empty: build it), PLACEMENT_ARGS (the placement flags).
# Writes OUT/metrics.jsonl, OUT/config.json, OUT/tensorboard/ and the full log OUT/train.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-runs/reward_plugin}"
NUM_ROLLOUT="${NUM_ROLLOUT:-100}"
EVAL_INTERVAL="${EVAL_INTERVAL:-50}"
BUILD_DIR="${BUILD_DIR:-build}"
PLUGIN_LIBRARY=libmath_format_reward.so
source "$here/../build_plugin.sh"  # PLUGIN: OUT/plugin/libmath_format_reward.so unless given
MAKE_TASK="$here/make_task.sh"
source "$here/../demo/warm_start.sh"  # OUT/task and, unless WARM_START names one, OUT/sft/model

MODEL_ARGS=(--hf-checkpoint "$WARM_START")
ROLLOUT_ARGS=(
  --prompt-data "$TASK/train.jsonl" --input-key input --label-key label
  --custom-rm-path "$PLUGIN:math_with_format_bonus" --reward-key score
  --rollout-shuffle --rollout-seed "$SEED" --sampling-seed "$SEED"
  --num-rollout "$NUM_ROLLOUT" --rollout-batch-size 16 --n-samples-per-prompt 16
  --rollout-max-response-len 32 --rollout-temperature 1.0 --rollout-stop-token-ids 258
  --global-batch-size 128 --micro-batch-size 64
)
EVAL_ARGS=(
  --eval-prompt-data add,"$TASK/eval.jsonl" --eval-interval "$EVAL_INTERVAL"
  --n-samples-per-eval-prompt 4 --eval-max-response-len 32 --eval-temperature 1.0
)
GRPO_ARGS=(--advantage-estimator grpo --eps-clip 0.2 --entropy-coef 0.0)
OPTIMIZER_ARGS=(--lr 5e-4 --lr-decay-style cosine --min-lr 5e-5 --weight-decay 0.01)
read -r -a PLACEMENT <<< "${PLACEMENT_ARGS:---actor-num-gpus-per-node 2 --rollout-num-gpus 2}"

echo "GRPO on math_with_format_bonus: $NUM_ROLLOUT rollouts of 16 prompts x 16 samples" \
  "($OUT/train.log)"
"$OOZE" train "${MODEL_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${GRPO_ARGS[@]}" \
  "${OPTIMIZER_ARGS[@]}" "${PLACEMENT[@]}" --output-dir "$OUT" "$@" 2>&1 |
  tee "$OUT/train.log" | { grep --line-buffered -E '^\[(eval|rollout [0-9]*[05]0/)' || true; } ||
  { tail -n 20 "$OUT/train.log" >&2; exit 1; }

evals=$(grep -o '"eval/add":[0-9.e-]*' "$OUT/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')
echo "eval/add (mean score, at most 1.1) at each evaluation: $evals"
