#!/usr/bin/env bash
# The reward plugin run's task, single-digit addition answered with reasoning and a boxed sum:
# writes into DIR
#   train.jsonl   the 100 problems "a+b=" with their sums as labels (the RL prompts)
#   eval.jsonl    the same 100 problems
#   sft.jsonl     STEPS x 100 demonstrations for the supervised warm start: the sum with
#                 probability CORRECT, else a sum off by 1 or 2; written well formed,
#                 "<think>a+b</think> \boxed{sum}", with probability FORMED, else as a bare
#                 "\boxed{sum}". The warm start thus gets both of the reward's parts only
#                 sometimes: math_with_format_bonus gives 1 for the right sum and 0.1 for the
#                 form, and RL can raise both.
#
#   make_task.sh DIR [SEED] [STEPS] [CORRECT] [FORMED]
set -euo pipefail
dir="$1"
seed="${2:-1}"
steps="${3:-160}"
correct="${4:-0.4}"
formed="${5:-0.5}"
mkdir -p "$dir"

problems() {
  awk 'BEGIN { for (a = 0; a <= 9; a++) for (b = 0; b <= 9; b++)
                 printf "{\"input\": \"%d+%d=\", \"label\": \"%d\"}\n", a, b, a + b }'
}
problems > "$dir/train.jsonl"
problems > "$dir/eval.jsonl"
awk -v seed="$seed" -v steps="$steps" -v correct="$correct" -v formed="$formed" 'BEGIN {
  srand(seed)
  for (s = 0; s < steps; s++) for (a = 0; a <= 9; a++) for (b = 0; b <= 9; b++) {
    answer = a + b
    if (rand() >= correct) {
      offset = int(rand() * 4) - 2; if (offset >= 0) offset++   # -2, -1, +1 or +2
      answer += offset; if (answer < 0) answer = 1 - answer     # still wrong, not negative
    }
    boxed = sprintf("\\\\boxed{%d}", answer)                    # JSON escapes the backslash
    if (rand() < formed) response = sprintf("<think>%d+%d</think> %s", a, b, boxed)
    else response = boxed
    printf "{\"input\": \"%d+%d=\", \"label\": \"%s\"}\n", a, b, response
  }
}' > "$dir/sft.jsonl"
