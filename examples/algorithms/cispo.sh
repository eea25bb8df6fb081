#!/usr/bin/env bash
# CISPO on the CPU demo's task (single-digit addition, examples/demo), as a Python loss:
# cispo_loss.py (Slime's custom-loss signature) replaces the policy loss; GRPO's group-normalised
# advantages. Every token keeps a gradient, weighted by its importance ratio clipped to at most
# 1 + 3 = 4 and detached (no lower bound: --eps-clip 1), where PPO's clip drops the token.
# The loss runs in each trainer rank's embedded Python on the step's own tensors
# (docs/custom_loss.md); its metrics, train/is_ratio_mean among them, are logged as the
# built-in ones.
#
#   examples/algorithms/cispo.sh [more ooze train flags]
# The flags given are passed last, so they win over the blocks below.
# Environment: OUT (runs/algorithms/cispo), BUILD_DIR (build), NUM_ROLLOUT (200), EVAL_INTERVAL
# (50), SEED (1), WARM_START (a warm-start model directory, e.g. an earlier run's OUT/sft/model;
# empty: make one here, about 30 s), SFT_STEPS (160), PLACEMENT_ARGS (the placement flags).
# Writes OUT/metrics.jsonl, OUT/config.json, OUT/tensorboard/ and the full log OUT/train.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-runs/algorithms/cispo}"
NUM_ROLLOUT="${NUM_ROLLOUT:-200}"
EVAL_INTERVAL="${EVAL_INTERVAL:-50}"
source "$here/../demo/warm_start.sh"

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
CISPO_ARGS=(
  --advantage-estimator grpo
  --loss-type custom_loss --custom-loss-function-path "$here/cispo_loss.py:cispo_loss"
  --eps-clip 1.0 --eps-clip-high 3.0
  --entropy-coef 0.0
)
OPTIMIZER_ARGS=(--lr 5e-4 --lr-decay-style cosine --min-lr 5e-5 --weight-decay 0.01)
read -r -a PLACEMENT <<< "${PLACEMENT_ARGS:---actor-num-gpus-per-node 2 --rollout-num-gpus 2}"

echo "CISPO (Python loss): $NUM_ROLLOUT rollouts of 16 prompts x 16 samples ($OUT/train.log)"
"$OOZE" train "${MODEL_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${CISPO_ARGS[@]}" \
  "${OPTIMIZER_ARGS[@]}" "${PLACEMENT[@]}" --output-dir "$OUT" "$@" 2>&1 |
  tee "$OUT/train.log" | { grep --line-buffered -E '^\[(eval|rollout [0-9]*[05]0/)' || true; } ||
  { tail -n 20 "$OUT/train.log" >&2; exit 1; }

evals=$(grep -o '"eval/add":[0-9.e-]*' "$OUT/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')
echo "eval/add at each evaluation: $evals"
