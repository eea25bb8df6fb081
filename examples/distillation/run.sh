#!/usr/bin/env bash
# On-policy distillation on the demo's task (examples/demo): a teacher trained by the demo's
# GRPO distills into a fresh warm-started student, same seed and rollout size (256 samples):
#   1. OUT/teacher-run: the demo (warm start + GRPO, 16 prompts x 16 samples) for
#      TEACHER_ROLLOUTS rollouts, its final policy written to OUT/teacher (--save-hf). Its
#      eval/add curve is that of GRPO alone from the warm start;
#   2. OUT/opd-sampled: the warm start distilled as Slime does (--use-opd --opd-type trainer: the
#      sampled tokens' teacher log-probs in the advantage), 256 prompts x 1 sample, so that no
#      group carries a reward signal: the teacher alone teaches;
#   3. OUT/opd-full-vocab: the same with --opd-full-vocab --opsd-beta 0: the forward KL to the
#      teacher's whole distribution at every response token (GKD).
# Prints eval/add at every evaluation of each run, and the first rollout at which each reaches
# the teacher's final eval/add (within 0.01).
#
#   examples/distillation/run.sh [OUT]
# Environment: BUILD_DIR (build), SEED (1), TEACHER_ROLLOUTS (800), NUM_ROLLOUT (200, the
# students'), EVAL_INTERVAL (25), OPD_KL_COEF (1.0), STUDENT_ARGS (more flags for both students).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$(mkdir -p "${1:-runs/distillation}" && cd "${1:-runs/distillation}" && pwd)"
demo="$here/../demo/run.sh"
export SEED="${SEED:-1}" EVAL_INTERVAL="${EVAL_INTERVAL:-25}"

echo "teacher, and GRPO alone: the demo for ${TEACHER_ROLLOUTS:-800} rollouts ($OUT/teacher-run)"
NUM_ROLLOUT="${TEACHER_ROLLOUTS:-800}" GRPO_EXTRA_ARGS="--save-hf $OUT/teacher" \
  bash "$demo" "$OUT/teacher-run" > /dev/null
export WARM_START="$OUT/teacher-run/sft/model" NUM_ROLLOUT="${NUM_ROLLOUT:-200}"
student="${STUDENT_ARGS:-} --n-samples-per-prompt 1 --rollout-batch-size 256 --use-opd \
--opd-type trainer --opd-teacher-hf-checkpoint $OUT/teacher --opd-kl-coef ${OPD_KL_COEF:-1.0}"

echo "student, sampled tokens ($OUT/opd-sampled)"
GRPO_EXTRA_ARGS="$student" bash "$demo" "$OUT/opd-sampled" > /dev/null
echo "student, whole distributions ($OUT/opd-full-vocab)"
GRPO_EXTRA_ARGS="$student --opd-full-vocab --opsd-beta 0" \
  bash "$demo" "$OUT/opd-full-vocab" > /dev/null

# "ROLLOUT:EVAL" pairs of a run's evaluations.
evaluations() {
  grep '"eval/add"' "$1/grpo/metrics.jsonl" | sed -E 's/.*"step":([0-9]+).*"eval\/add":([0-9.e-]+).*/\1:\2/'
}
goal=$(evaluations "$OUT/teacher-run" | tail -1 | cut -d: -f2)
report() {
  local reached
  reached=$(evaluations "$2" | awk -F: -v goal="$goal" '$2 >= goal - 0.01 { print $1; exit }')
  printf '  %-28s %s\n' "$1" "$(evaluations "$2" | cut -d: -f2 | paste -sd' ')"
  printf '  %-28s %s\n' "" "reaches $goal (within 0.01) at rollout ${reached:-never}"
}
echo "eval/add every $EVAL_INTERVAL rollouts; the teacher's final: $goal"
report "GRPO alone (the teacher):" "$OUT/teacher-run"
report "OPD, sampled tokens:" "$OUT/opd-sampled"
report "OPD, whole distributions:" "$OUT/opd-full-vocab"
