#!/usr/bin/env bash
# A multi-turn GRPO run with this directory's calculator tool, on a task the CPU demo's tiny
# model can learn:
#   1. the generate plugin built as a user builds it: ooze's plugin files installed from
#      BUILD_DIR into OUT/sdk, this directory configured against that prefix alone and built in
#      OUT/plugin;
#   2. single-digit addition (make_task.sh) and a supervised warm start of a tiny Qwen3 on
#      demonstrations that call the calculator 30% of the time,
#      "<calc>a+b</calc><result>sum</result> \boxed{sum}", and otherwise answer "\boxed{sum}"
#      at once, right 40% of the time;
#   3. GRPO where every sample is a dialogue (calculator_generate): the policy's turn stops at
#      </calc>, the tool's answer is appended with loss mask 0, and the policy writes on. The
#      reward is the built-in math rule (the last \boxed{} against the sum). The tool is always
#      right, so calling it pays: rollout/tool_calls (calls per sample) and eval/add rise.
#
#   examples/multi_turn/run.sh [more ooze train flags]
# The flags given are passed last, so they win over the blocks below.
# Environment: OUT (runs/multi_turn), BUILD_DIR (build), NUM_ROLLOUT (100), EVAL_INTERVAL
# (50), SEED (1), SFT_STEPS (160), WARM_START (a warm-start model directory from an earlier
# run's OUT/sft/model; empty: make one), GENERATE (cpp: the C++ plugin, the default; python:
# its twin calculator_generate.py, nothing to build), PLUGIN (an already built
# libcalculator_generate.so; empty: build it), PLACEMENT_ARGS (the placement flags).
# Writes OUT/metrics.jsonl, OUT/config.json, OUT/tensorboard/ and the full log OUT/train.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-runs/multi_turn}"
NUM_ROLLOUT="${NUM_ROLLOUT:-100}"
EVAL_INTERVAL="${EVAL_INTERVAL:-50}"
BUILD_DIR="${BUILD_DIR:-build}"
case "${GENERATE:-cpp}" in
  cpp)
    PLUGIN_LIBRARY=libcalculator_generate.so
    source "$here/../build_plugin.sh"  # PLUGIN: OUT/plugin/libcalculator_generate.so unless given
    GENERATE_PATH="$PLUGIN:calculator_generate"
    ;;
  python) GENERATE_PATH="$here/calculator_generate.py:calculator_generate" ;;
  *) echo "GENERATE is cpp or python, not '$GENERATE'" >&2; exit 1 ;;
esac
MAKE_TASK="$here/make_task.sh"
# Every token of the warm start weighs the same: with the default per-sample mean, the first
# token of a long tool-using demonstration would weigh a quarter of a short direct answer's, and
# the warm start would call the tool far less often than the demonstrations do.
SFT_EXTRA_ARGS=(--loss-aggregation token-mean)
source "$here/../demo/warm_start.sh"  # OUT/task and, unless WARM_START names one, OUT/sft/model

MODEL_ARGS=(--hf-checkpoint "$WARM_START")
ROLLOUT_ARGS=(
  --prompt-data "$TASK/train.jsonl" --input-key input --label-key label
  --custom-generate-function-path "$GENERATE_PATH" --rollout-stop '</calc>'
  --rm-type math
  --rollout-shuffle --rollout-seed "$SEED" --sampling-seed "$SEED"
  --num-rollout "$NUM_ROLLOUT" --rollout-batch-size 16 --n-samples-per-prompt 16
  --rollout-max-response-len 64 --rollout-temperature 1.0 --rollout-stop-token-ids 258
  --global-batch-size 128 --micro-batch-size 64
)
EVAL_ARGS=(
  --eval-prompt-data add,"$TASK/eval.jsonl" --eval-interval "$EVAL_INTERVAL"
  --n-samples-per-eval-prompt 4 --eval-max-response-len 64 --eval-temperature 1.0
)
GRPO_ARGS=(--advantage-estimator grpo --eps-clip 0.2 --entropy-coef 0.0)
OPTIMIZER_ARGS=(--lr 5e-4 --lr-decay-style cosine --min-lr 5e-5 --weight-decay 0.01)
read -r -a PLACEMENT <<< "${PLACEMENT_ARGS:---actor-num-gpus-per-node 2 --rollout-num-gpus 2}"

echo "GRPO with the calculator: $NUM_ROLLOUT rollouts of 16 prompts x 16 samples ($OUT/train.log)"
"$OOZE" train "${MODEL_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${GRPO_ARGS[@]}" \
  "${OPTIMIZER_ARGS[@]}" "${PLACEMENT[@]}" --output-dir "$OUT" "$@" 2>&1 |
  tee "$OUT/train.log" | { grep --line-buffered -E '^\[(eval|rollout [0-9]*[05]0/)' || true; } ||
  { tail -n 20 "$OUT/train.log" >&2; exit 1; }

values_of() { grep -o "\"$1\":[0-9.e-]*" "$OUT/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }
echo "eval/add at each evaluation: $(values_of eval/add)"
calls=$(values_of rollout/tool_calls | awk '{print $1, "->", $NF}')
echo "rollout/tool_calls (calls per sample), first -> last rollout: $calls"
