#!/usr/bin/env bash
# On-policy distillation on the demo's task (examples/demo): a teacher trained by the demo's
# GRPO distills into a fresh warm-started student, against the same student trained by GRPO
# alone, same seed and rollouts:
#   1. OUT/teacher-run: the demo (warm start + GRPO for TEACHER_ROLLOUTS rollouts), its final
#      policy written to OUT/teacher (--save-hf);
#   2. OUT/grpo: GRPO alone from the same warm start for NUM_ROLLOUT rollouts;
#   3. OUT/opd: the same with --use-opd --opd-type trainer and the teacher.
# Prints eval/add at every evaluation for both students and the teacher's final level.
#
#   examples/distillation/run.sh [OUT]
# Environment: BUILD_DIR (build), SEED (1), TEACHER_ROLLOUTS (800), NUM_ROLLOUT (200),
# EVAL_INTERVAL (25), OPD_KL_COEF (1.0), TEACHER (an existing teacher model: skips step 1),
# STUDENT_ARGS (more flags for both students, e.g. "--n-samples-per-prompt 2
# --rollout-batch-size 64": fewer samples per prompt, where GRPO's group signal is sparse).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$(mkdir -p "${1:-runs/distillation}" && cd "${1:-runs/distillation}" && pwd)"
demo="$here/../demo/run.sh"
export SEED="${SEED:-1}"

if [ -z "${TEACHER:-}" ]; then
  echo "teacher: the demo's GRPO for ${TEACHER_ROLLOUTS:-800} rollouts ($OUT/teacher-run)"
  NUM_ROLLOUT="${TEACHER_ROLLOUTS:-800}" GRPO_EXTRA_ARGS="--save-hf $OUT/teacher" \
    bash "$demo" "$OUT/teacher-run" | tail -1 | sed 's/^/  /'
  TEACHER="$OUT/teacher"
fi
export WARM_START="${WARM_START:-$OUT/teacher-run/sft/model}"
export NUM_ROLLOUT="${NUM_ROLLOUT:-200}" EVAL_INTERVAL="${EVAL_INTERVAL:-25}"

echo "student, GRPO alone ($OUT/grpo)"
GRPO_EXTRA_ARGS="${STUDENT_ARGS:-}" bash "$demo" "$OUT/grpo" > /dev/null
echo "student, GRPO + on-policy distillation ($OUT/opd)"
GRPO_EXTRA_ARGS="${STUDENT_ARGS:-} --use-opd --opd-type trainer \
--opd-teacher-hf-checkpoint $TEACHER --opd-kl-coef ${OPD_KL_COEF:-1.0}" \
  bash "$demo" "$OUT/opd" > /dev/null

curve() { grep -o '"eval/add":[0-9.e-]*' "$1/metrics.jsonl" | cut -d: -f2 | paste -sd' '; }
echo "eval/add every $EVAL_INTERVAL rollouts"
[ -f "$OUT/teacher-run/grpo/metrics.jsonl" ] && echo "  teacher (final): $(curve "$OUT/teacher-run/grpo" | awk '{print $NF}')"
echo "  GRPO alone:      $(curve "$OUT/grpo/grpo")"
echo "  GRPO + OPD:      $(curve "$OUT/opd/grpo")"
