#!/usr/bin/env bash
# The CPU demo (`make demo`): a tiny Qwen3 learns single-digit addition by reinforcement.
#   1. a generated model (hidden 128, 2 layers, byte tokenizer) and the task (make_task.sh);
#   2. a supervised warm start on noisy demonstrations (`ooze train --rollout-function-path
#      sft --loss-type sft_loss`): the model answers in the right format, rarely right;
#   3. GRPO with 2 trainer ranks and 2 engines, evaluated every 100 rollouts: eval/add, the
#      share of sampled answers that are exactly the sum, climbs from the warm start's level.
# Then `ooze plot` draws the curves. Everything lands in OUT:
#   OUT/grpo/metrics.jsonl, OUT/grpo/tensorboard/, OUT/grpo/plots/dashboard.png (and a PNG per
#   metric), OUT/*.log
#
#   examples/demo/run.sh [OUT]
# Environment: BUILD_DIR (build), SEED (1), SFT_STEPS (160), NUM_ROLLOUT (800), EVAL_INTERVAL
# (100), PLACEMENT_ARGS (the placement flags, default 2 trainer ranks and 2 engines apart),
# GRPO_EXTRA_ARGS (more flags for the GRPO run, e.g. "--lora-rank 16 --lora-alpha 32"), and
# WARM_START: a warm-start model from an earlier run (OUT/sft/model) to begin GRPO from, and
# REWARD: python (the default: examples/demo/exact_match_reward.py) or cpp (the C++ plugin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-runs/demo}"
NUM_ROLLOUT="${NUM_ROLLOUT:-800}"
EVAL_INTERVAL="${EVAL_INTERVAL:-100}"
rm -rf "$OUT"
source "$here/warm_start.sh"  # OUT/task and, unless WARM_START names one, OUT/sft/model

echo "GRPO: $NUM_ROLLOUT rollouts of 16 prompts x 16 samples ($OUT/grpo.log)"
MODEL_ARGS=(--hf-checkpoint "$WARM_START")
ROLLOUT_ARGS=(
  --prompt-data "$TASK/train.jsonl" --input-key input --label-key label
  --custom-rm-path "$REWARD_PATH"
  --rollout-shuffle --rollout-seed "$SEED" --sampling-seed "$SEED"
  --num-rollout "$NUM_ROLLOUT" --rollout-batch-size 16 --n-samples-per-prompt 16
  --rollout-max-response-len 4 --rollout-temperature 1.0 --rollout-stop-token-ids 258
  --global-batch-size 128 --micro-batch-size 64
)
EVAL_ARGS=(
  --eval-prompt-data add,"$TASK/eval.jsonl" --eval-interval "$EVAL_INTERVAL"
  --n-samples-per-eval-prompt 4 --eval-max-response-len 4 --eval-temperature 1.0
)
GRPO_ARGS=(--advantage-estimator grpo)
OPTIMIZER_ARGS=(--lr 5e-4 --lr-decay-style cosine --min-lr 5e-5)
read -r -a PLACEMENT <<< "${PLACEMENT_ARGS:---actor-num-gpus-per-node 2 --rollout-num-gpus 2}"
read -r -a EXTRA <<< "${GRPO_EXTRA_ARGS:-}"
"$OOZE" train "${MODEL_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${GRPO_ARGS[@]}" \
  "${OPTIMIZER_ARGS[@]}" "${PLACEMENT[@]}" "${EXTRA[@]}" --output-dir "$OUT/grpo" 2>&1 \
  | tee "$OUT/grpo.log" \
  | grep --line-buffered -E '^\[(eval|rollout [0-9]*00/)'

"$OOZE" plot "$OUT/grpo" > /dev/null
first=$(grep -m1 -o '"eval/add":[0-9.e-]*' "$OUT/grpo/metrics.jsonl" | cut -d: -f2)
last=$(grep -o '"eval/add":[0-9.e-]*' "$OUT/grpo/metrics.jsonl" | tail -1 | cut -d: -f2)
echo "eval/add: $first after the warm start -> $last after GRPO"
echo "metrics: $OUT/grpo/metrics.jsonl  TensorBoard: $OUT/grpo/tensorboard  plots: $OUT/grpo/plots/dashboard.png"
