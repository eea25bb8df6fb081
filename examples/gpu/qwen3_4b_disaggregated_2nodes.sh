#!/usr/bin/env bash
# GRPO on a real checkpoint: Qwen3-4B on DAPO-Math-17k, on two nodes of 8 GPUs each, trainer and
# rollout engines apart: 8 FSDP trainer ranks fill the first node, 8 engines (one GPU each) the
# second, and after each training step the new weights go from trainer rank 0 to every engine
# by an NCCL broadcast. Start the two-node cluster first (`ooze start`, see
# examples/cluster) and run this on the head node; what else it needs (an ooze build against a
# CUDA LibTorch on both nodes, the checkpoint and data on both) is in examples/gpu/README.md.
#
#   ADDRESS=HEAD_IP:6380 examples/gpu/qwen3_4b_disaggregated_2nodes.sh [more ooze train flags]
# The flags given are passed last, so they win over the blocks below.
# Environment: ADDRESS (the head's HOST:PORT; required), MODEL_DIR (/root/Qwen3-4B, the Hugging
# Face checkpoint, at the same path on both nodes), DATA_DIR (/root: holds
# dapo-math-17k/dapo-math-17k.jsonl and aime-2024/aime-2024.jsonl), OUT (runs/qwen3_4b_grpo),
# BUILD_DIR (build), NUM_ROLLOUT (3000).
# Writes OUT/metrics.jsonl, OUT/tensorboard/, checkpoints in OUT/checkpoints (every 100
# rollouts; rerun with --load OUT/checkpoints to resume) and the final policy in OUT/hf.
set -euo pipefail
ADDRESS="${ADDRESS:-${OOZE_ADDRESS:-}}"
MODEL_DIR="${MODEL_DIR:-/root/Qwen3-4B}"
DATA_DIR="${DATA_DIR:-/root}"
OUT="${OUT:-runs/qwen3_4b_grpo}"
BUILD_DIR="${BUILD_DIR:-build}"
NUM_ROLLOUT="${NUM_ROLLOUT:-3000}"
if [ -z "$ADDRESS" ]; then
  echo "set ADDRESS to the HOST:PORT of a two-node cluster started with \`ooze start\`" \
    "(examples/cluster)" >&2
  exit 1
fi
mkdir -p "$OUT"

MODEL_ARGS=(--hf-checkpoint "$MODEL_DIR")
ROLLOUT_ARGS=(
  --prompt-data "$DATA_DIR/dapo-math-17k/dapo-math-17k.jsonl" --input-key prompt --label-key label
  --apply-chat-template --rollout-shuffle
  --rm-type deepscaler
  --num-rollout "$NUM_ROLLOUT" --rollout-batch-size 32 --n-samples-per-prompt 8
  --rollout-max-response-len 8192 --rollout-temperature 1.0
  --global-batch-size 256 --balance-data
)
EVAL_ARGS=(
  --eval-prompt-data aime,"$DATA_DIR/aime-2024/aime-2024.jsonl" --eval-interval 20
  --n-samples-per-eval-prompt 16 --eval-max-response-len 16384 --eval-top-p 0.7
)
GRPO_ARGS=(
  --advantage-estimator grpo
  --use-kl-loss --kl-loss-coef 0.0 --kl-loss-type low_var_kl
  --entropy-coef 0.0
  --eps-clip 0.2 --eps-clip-high 0.28
)
OPTIMIZER_ARGS=(
  --lr 1e-6 --lr-decay-style constant --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.98
)
TRAIN_ARGS=(--bf16 --gradient-checkpointing --use-dynamic-batch-size --max-tokens-per-gpu 9216)
ENGINE_ARGS=(
  # Each engine has a GPU of its own: most of it goes to the KV cache.
  --engine-kv-cache-memory-mb 49152 --engine-max-running-requests 256
)
PLACEMENT_ARGS=(
  --address "$ADDRESS"
  --actor-num-nodes 1 --actor-num-gpus-per-node 8
  --rollout-num-gpus 8 --rollout-num-gpus-per-engine 1
)
OUTPUT_ARGS=(
  --output-dir "$OUT" --save "$OUT/checkpoints" --save-interval 100 --save-hf "$OUT/hf"
)

"$BUILD_DIR/launcher/ooze" train "${MODEL_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" \
  "${GRPO_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" "${TRAIN_ARGS[@]}" "${ENGINE_ARGS[@]}" \
  "${PLACEMENT_ARGS[@]}" "${OUTPUT_ARGS[@]}" "$@" 2>&1 | tee "$OUT/train.log"
