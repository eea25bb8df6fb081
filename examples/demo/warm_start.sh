# Sourced by the CPU examples (examples/demo/run.sh, examples/algorithms, the reward plugin and
# multi-turn runs): a task and its supervised warm start.
#   OUT/task/{train,eval,sft}.jsonl   single-digit addition (examples/demo/make_task.sh)
#   OUT/sft/model                     the warm start: a tiny Qwen3 (hidden 128, 2 layers, byte
#                                     tokenizer) trained for SFT_STEPS supervised steps on noisy
#                                     demonstrations; it answers in the right format, rarely right
# Skipped when WARM_START already names a model directory (an earlier run's OUT/sft/model).
# Reads OUT, BUILD_DIR (build), SEED (1), SFT_STEPS (160), WARM_START, MAKE_TASK (the task's
# generator, called as MAKE_TASK DIR SEED STEPS; default the demo's make_task.sh) and
# SFT_EXTRA_ARGS (an array of more flags for the warm start), REWARD (python: the demo's reward
# as a Python file, the default; cpp: the same reward as a C++ plugin); sets OOZE, TASK, SEED,
# WARM_START and REWARD_PATH (the --custom-rm-path of the exact-match reward).
BUILD_DIR="${BUILD_DIR:-build}"
SEED="${SEED:-1}"
SFT_STEPS="${SFT_STEPS:-160}"
WARM_START="${WARM_START:-}"
OOZE="$BUILD_DIR/launcher/ooze"
case "${REWARD:-python}" in
  python) REWARD_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/exact_match_reward.py:exact_match" ;;
  cpp) REWARD_PATH="$BUILD_DIR/examples/demo/libexact_match_reward.so:exact_match" ;;
  *) echo "REWARD is python or cpp, not '$REWARD'" >&2; exit 1 ;;
esac
TASK="$OUT/task"
# One intra-op thread per process: trainer ranks and engines share the machine's cores.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

if [ ! -x "$OOZE" ]; then
  echo "no ooze binary at $OOZE: build it (ninja -C build launcher/ooze) or set BUILD_DIR" >&2
  exit 1
fi
mkdir -p "$OUT"
# A fresh run: metrics.jsonl and TensorBoard files would otherwise grow across reruns.
rm -rf "$OUT/metrics.jsonl" "$OUT/tensorboard"
"${MAKE_TASK:-$(dirname "${BASH_SOURCE[0]}")/make_task.sh}" "$TASK" "$SEED" "$SFT_STEPS"

if [ -z "$WARM_START" ]; then
  echo "warm start: $SFT_STEPS supervised steps on noisy demonstrations ($OUT/sft.log)"
  "$OOZE" model init --arch qwen3 --hidden-size 128 --layers 2 --heads 4 --kv-heads 2 \
    --tokenizer byte --seed "$SEED" --out "$OUT/init" > "$OUT/init.log"
  SFT_ARGS=(
    --hf-checkpoint "$OUT/init"
    --prompt-data "$TASK/sft.jsonl" --input-key input --label-key label
    --rollout-function-path sft --loss-type sft_loss --debug-train-only
    --rollout-shuffle --rollout-seed "$SEED"
    --rollout-batch-size 100 --n-samples-per-prompt 1 --global-batch-size 100
    --micro-batch-size 50 --num-rollout "$SFT_STEPS"
    --actor-num-gpus-per-node 2
    --lr 3e-3
    --output-dir "$OUT/sft" --save-hf "$OUT/sft/model"
    ${SFT_EXTRA_ARGS[@]+"${SFT_EXTRA_ARGS[@]}"}
  )
  "$OOZE" train "${SFT_ARGS[@]}" > "$OUT/sft.log" 2>&1 ||
    { tail -n 20 "$OUT/sft.log" >&2; exit 1; }
  WARM_START="$OUT/sft/model"
fi
