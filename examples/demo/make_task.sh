#!/usr/bin/env bash
# The demo's task, single-digit addition: writes into DIR
#   train.jsonl   the 100 problems "a+b=" with their sums as labels (GRPO's prompts)
#   eval.jsonl    the same 100 problems (eval/add: how often a sampled answer is exact)
#   sft.jsonl     STEPS x 100 noisy demonstrations for the supervised warm start: the sum with
#                 probability CORRECT, else a sum off by 1 or 2. The warm start thus learns the
#                 format (a number, then EOS) and a spread of answers around the right one,
#                 which GRPO can then sharpen; exact demonstrations would leave confidently
#                 wrong answers that no sampled group ever rewards.
#
#   make_task.sh DIR [SEED] [STEPS] [CORRECT]
set -euo pipefail
dir="$1"
seed="${2:-1}"
steps="${3:-160}"
correct="${4:-0.4}"
mkdir -p "$dir"

problems() {
  awk 'BEGIN { for (a = 0; a <= 9; a++) for (b = 0; b <= 9; b++)
                 printf "{\"input\": \"%d+%d=\", \"label\": \"%d\"}\n", a, b, a + b }'
}
problems > "$dir/train.jsonl"
problems > "$dir/eval.jsonl"
awk -v seed="$seed" -v steps="$steps" -v correct="$correct" 'BEGIN {
  srand(seed)
  for (s = 0; s < steps; s++) for (a = 0; a <= 9; a++) for (b = 0; b <= 9; b++) {
    answer = a + b
    if (rand() >= correct) {
      offset = int(rand() * 4) - 2; if (offset >= 0) offset++   # -2, -1, +1 or +2
      answer += offset; if (answer < 0) answer = 1 - answer     # still wrong, not negative
    }
    printf "{\"input\": \"%d+%d=\", \"label\": \"%d\"}\n", a, b, answer
  }
}' > "$dir/sft.jsonl"
