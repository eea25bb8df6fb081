#!/usr/bin/env bash
# GRPO on the CPU demo's task (single-digit addition, examples/demo) with a curriculum: the
# prompts come from a Python data source, curriculum.py:EasyFirst (--data-source-path), which
# serves the problems smallest sum first and round again; its position is saved with every
# checkpoint (OUT/save/easy_first_<rollout>.json) and read back by --load. The rest is grpo.sh.
#
#   examples/algorithms/curriculum.sh [more ooze train flags]
# The flags given are passed last, so they win over the blocks below.
# Environment: OUT (runs/algorithms/curriculum), BUILD_DIR (build), NUM_ROLLOUT (200),
# EVAL_INTERVAL (50), SEED (1), WARM_START (a warm-start model directory, e.g. an earlier run's
# OUT/sft/model; empty: make one here, about 30 s), SFT_STEPS (160), PLACEMENT_ARGS (the
# placement flags).
# Writes OUT/metrics.jsonl, OUT/config.json, OUT/tensorboard/, OUT/save/ and OUT/train.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-runs/algorithms/curriculum}"
NUM_ROLLOUT="${NUM_ROLLOUT:-200}"
EVAL_INTERVAL="${EVAL_INTERVAL:-50}"
source "$here/../demo/warm_start.sh"

MODEL_ARGS=(--hf-checkpoint "$WARM_START")
ROLLOUT_ARGS=(
  --prompt-data "$TASK/train.jsonl" --input-key input --label-key label
  --data-source-path "$here/curriculum.py:EasyFirst"
  --custom-rm-path "$REWARD_PATH" --sampling-seed "$SEED"
  --num-rollout "$NUM_ROLLOUT" --rollout-batch-size 16 --n-samples-per-prompt 16
  --rollout-max-response-len 4 --rollout-temperature 1.0 --rollout-stop-token-ids 258
  --global-batch-size 128 --micro-batch-size 64
)
EVAL_ARGS=(
  --eval-prompt-data add,"$TASK/eval.jsonl" --eval-interval "$EVAL_INTERVAL"
  --n-samples-per-eval-prompt 4 --eval-max-response-len 4 --eval-temperature 1.0
)
GRPO_ARGS=(--advantage-estimator grpo --eps-clip 0.2 --entropy-coef 0.0)
OPTIMIZER_ARGS=(--lr 5e-4 --lr-decay-style cosine --min-lr 5e-5 --weight-decay 0.01)
SAVE_ARGS=(--save "$OUT/save" --save-interval 50)
read -r -a PLACEMENT <<< "${PLACEMENT_ARGS:---actor-num-gpus-per-node 2 --rollout-num-gpus 2}"

echo "curriculum: $NUM_ROLLOUT rollouts of 16 prompts x 16 samples, easiest first ($OUT/train.log)"
"$OOZE" train "${MODEL_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${GRPO_ARGS[@]}" \
  "${OPTIMIZER_ARGS[@]}" "${SAVE_ARGS[@]}" "${PLACEMENT[@]}" --output-dir "$OUT" "$@" 2>&1 |
  tee "$OUT/train.log" | { grep --line-buffered -E '^\[(eval|rollout [0-9]*[05]0/)' || true; } ||
  { tail -n 20 "$OUT/train.log" >&2; exit 1; }

evals=$(grep -o '"eval/add":[0-9.e-]*' "$OUT/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')
echo "eval/add at each evaluation: $evals"
