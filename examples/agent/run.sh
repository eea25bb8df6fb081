#!/usr/bin/env bash
# GRPO on the calculator task of examples/multi_turn, where every sample is an agent program
# of its own (--agent-command) talking to ooze through an OpenAI-compatible session:
#   AGENT=python  calculator_agent.py, standard library only (the default)
#   AGENT=js      calculator_agent.mjs, the official "openai" npm client
# The warm start is multi_turn's (demonstrations that call the calculator 30% of the time);
# then each rollout runs 16 x 16 agents, whose sessions record the exact tokens the engines
# sampled, and the built-in math rule scores the last \boxed{}. rollout/calculator_calls (the
# agents' own metric) and eval/add rise as the policy learns that calling the tool pays.
#
#   examples/agent/run.sh [more ooze train flags]
# Environment: OUT (runs/agent), BUILD_DIR (build), NUM_ROLLOUT (100), EVAL_INTERVAL (50),
# SEED (1), SFT_STEPS (160), WARM_START (an earlier run's OUT/sft/model), AGENT (python | js),
# PLACEMENT_ARGS. Writes OUT/metrics.jsonl, OUT/tensorboard/ and the log OUT/train.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-runs/agent}"
NUM_ROLLOUT="${NUM_ROLLOUT:-100}"
EVAL_INTERVAL="${EVAL_INTERVAL:-50}"
BUILD_DIR="${BUILD_DIR:-build}"
case "${AGENT:-python}" in
  python) AGENT_COMMAND="python3 $here/calculator_agent.py" ;;
  js) AGENT_COMMAND="env NODE_PATH=$here/../../.deps/npm/node_modules node $here/calculator_agent.mjs" ;;
  *) echo "AGENT is python or js, not '$AGENT'" >&2; exit 1 ;;
esac
MAKE_TASK="$here/../multi_turn/make_task.sh"
SFT_EXTRA_ARGS=(--loss-aggregation token-mean)  # as examples/multi_turn/run.sh, for the same reason
source "$here/../demo/warm_start.sh"  # OUT/task and, unless WARM_START names one, OUT/sft/model

ROLLOUT_ARGS=(
  --prompt-data "$TASK/train.jsonl" --input-key input --label-key label
  --agent-command "$AGENT_COMMAND" --agent-timeout 120 --rollout-concurrency 64
  --rm-type math
  --rollout-shuffle --rollout-seed "$SEED"
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

echo "GRPO with $AGENT_COMMAND: $NUM_ROLLOUT rollouts of 16 prompts x 16 agents ($OUT/train.log)"
"$OOZE" train --hf-checkpoint "$WARM_START" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" \
  "${GRPO_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" "${PLACEMENT[@]}" --output-dir "$OUT" "$@" 2>&1 |
  tee "$OUT/train.log" | { grep --line-buffered -E '^\[(eval|rollout [0-9]*[05]0/)' || true; } ||
  { tail -n 20 "$OUT/train.log" >&2; exit 1; }

values_of() { grep -o "\"$1\":[0-9.e-]*" "$OUT/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }
echo "eval/add at each evaluation: $(values_of eval/add)"
echo "rollout/raw_reward, first -> last rollout: $(values_of rollout/raw_reward | awk '{print $1, "->", $NF}')"
echo "rollout/calculator_calls, first -> last rollout: $(values_of rollout/calculator_calls | awk '{print $1, "->", $NF}')"
