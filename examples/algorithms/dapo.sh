#!/usr/bin/env bash
# DAPO on the CPU demo's task (single-digit addition, examples/demo): GRPO's advantages with
#   - dynamic sampling: groups whose 16 rewards all agree (all right or all wrong) teach
#     nothing and are dropped; more prompts are drawn, 24 per round, until 16 groups with a
#     spread of rewards are kept (rollout/dynamic_filter/kept_groups, dropped_groups, and
#     drop_zero_std_0.0 / drop_zero_std_1.0 in metrics.jsonl); the filter is a Python function,
#     dapo_filter.py (--dynamic-sampling-filter-path nonzero_std is the same rule built in);
#   - clip-higher: the ratio may rise to 1 + 0.28 but fall only to 1 - 0.2, so unlikely good
#     answers can gain probability faster;
#   - the token-level loss (token-mean), so long responses weigh by their tokens;
#   - no KL term.
# DAPO's overlong reward shaping does not apply: every answer here fits in 4 tokens.
#
#   examples/algorithms/dapo.sh [more ooze train flags]
# The flags given are passed last, so they win over the blocks below.
# Environment: OUT (runs/algorithms/dapo), BUILD_DIR (build), NUM_ROLLOUT (200), EVAL_INTERVAL
# (50), SEED (1), WARM_START (a warm-start model directory, e.g. an earlier run's OUT/sft/model;
# empty: make one here, about 30 s), SFT_STEPS (160), PLACEMENT_ARGS (the placement flags).
# Writes OUT/metrics.jsonl, OUT/config.json, OUT/tensorboard/ and the full log OUT/train.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-runs/algorithms/dapo}"
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
  --over-sampling-batch-size 24
  --dynamic-sampling-filter-path "$here/dapo_filter.py:check_reward_nonzero_std"
)
EVAL_ARGS=(
  --eval-prompt-data add,"$TASK/eval.jsonl" --eval-interval "$EVAL_INTERVAL"
  --n-samples-per-eval-prompt 4 --eval-max-response-len 4 --eval-temperature 1.0
)
DAPO_ARGS=(
  --advantage-estimator grpo
  --eps-clip 0.2 --eps-clip-high 0.28
  --loss-aggregation token-mean
  --entropy-coef 0.0
)
OPTIMIZER_ARGS=(--lr 5e-4 --lr-decay-style cosine --min-lr 5e-5 --weight-decay 0.01)
read -r -a PLACEMENT <<< "${PLACEMENT_ARGS:---actor-num-gpus-per-node 2 --rollout-num-gpus 2}"

echo "DAPO: $NUM_ROLLOUT rollouts of 16 kept prompts x 16 samples ($OUT/train.log)"
"$OOZE" train "${MODEL_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${DAPO_ARGS[@]}" \
  "${OPTIMIZER_ARGS[@]}" "${PLACEMENT[@]}" --output-dir "$OUT" "$@" 2>&1 |
  tee "$OUT/train.log" | { grep --line-buffered -E '^\[(eval|rollout [0-9]*[05]0/)' || true; } ||
  { tail -n 20 "$OUT/train.log" >&2; exit 1; }

evals=$(grep -o '"eval/add":[0-9.e-]*' "$OUT/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')
echo "eval/add at each evaluation: $evals"
