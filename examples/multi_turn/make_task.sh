#!/usr/bin/env bash
# The multi-turn run's task, single-digit addition with a calculator at hand: writes into DIR
#   train.jsonl   the 100 problems "a+b=" with their sums as labels (the RL prompts)
#   eval.jsonl    the same 100 problems
#   sft.jsonl     STEPS x 100 demonstrations for the supervised warm start. With probability
#                 TOOL one uses the calculator and copies its answer:
#                   <calc>a+b</calc><result>sum</result> \boxed{sum}
#                 otherwise it answers at once, "\boxed{sum}", right with probability CORRECT
#                 and else off by 1 or 2. The warm start thus calls the tool only sometimes;
#                 the tool is always right, so RL can learn to call it.
#
#   make_task.sh DIR [SEED] [STEPS] [TOOL] [CORRECT]
set -euo pipefail
dir="$1"
seed="${2:-1}"
steps="${3:-160}"
tool="${4:-0.3}"
correct="${5:-0.4}"
mkdir -p "$dir"

problems() {
  awk 'BEGIN { for (a = 0; a <= 9; a++) for (b = 0; b <= 9; b++)
                 printf "{\"input\": \"%d+%d=\", \"label\": \"%d\"}\n", a, b, a + b }'
}
problems > "$dir/train.jsonl"
problems > "$dir/eval.jsonl"
awk -v seed="$seed" -v steps="$steps" -v tool="$tool" -v correct="$correct" 'BEGIN {
  srand(seed)
  for (s = 0; s < steps; s++) for (a = 0; a <= 9; a++) for (b = 0; b <= 9; b++) {
    answer = a + b
    if (rand() < tool) {
      response = sprintf("<calc>%d+%d</calc><result>%d</result> \\\\boxed{%d}",
                         a, b, answer, answer)
    } else {
      if (rand() >= correct) {
        offset = int(rand() * 4) - 2; if (offset >= 0) offset++   # -2, -1, +1 or +2
        answer += offset; if (answer < 0) answer = 1 - answer     # still wrong, not negative
      }
      response = sprintf("\\\\boxed{%d}", answer)               # JSON escapes the backslash
    }
    printf "{\"input\": \"%d+%d=\", \"label\": \"%s\"}\n", a, b, response
  }
}' > "$dir/sft.jsonl"
