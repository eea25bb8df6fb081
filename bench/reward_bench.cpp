// Throughput of the built-in math reward (--rm-type math, rollout/rewards/math_reward.h) on one
// thread, over a mixed table of 384 graded responses: exact answers, LaTeX variants a string
// normal form settles (\dfrac, 1,000, 10\%, 90^\circ, units), answers only the symbolic check
// settles (0.5 vs \frac{1}{2}, \sqrt{8} vs 2\sqrt{2}, polynomials, tuples), and wrong answers,
// which go through every check before scoring 0. Figures are the best of 7 passes after a
// warm-up. The baseline, on the same table in the same run, is the normalised-string
// comparison alone (box extraction + Hendrycks' normal form, no symbolic check):
//
//   math_reward       cases/s of math_reward vs the string comparison (ratio < 1: the cost of
//                     the symbolic check)
//   correct_grades    fraction of the table graded as intended, by math_reward vs by the
//                     string comparison alone
//
//   bench_reward_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/load_time_settings.h"
#include "rollout/rewards/boxed_answer.h"
#include "rollout/rewards/math_normalization.h"
#include "rollout/rewards/math_reward.h"

namespace rollout = ooze::rollout;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRepetitions = 7;
constexpr int kVariants = 12;

struct GradedCase {
  std::string response;
  std::string label;
  bool correct;
};

// Each template's "N" becomes 1..kVariants (and "M" N + 1), so that no two cases are the same
// strings.
struct Template {
  const char* response;
  const char* label;
  bool correct;
};

constexpr Template kTemplates[] = {
    {"So the total is \\boxed{N}.", "N", true},
    {"Therefore \\boxed{\\dfrac{1}{M}}", "\\frac{1}{M}", true},
    {"\\boxed{N,000}", "N000", true},
    {"\\boxed{N0\\%}", "N0", true},
    {"the angle is \\boxed{N0^\\circ}", "N0", true},
    {"\\boxed{N\\text{ cm}}", "N", true},
    {"\\boxed{(N, M)}", "(N,M)", true},
    {"\\boxed{x = N}", "N", true},
    {"\\boxed{0.5}", "\\frac{1}{2}", true},
    {"\\boxed{N.50}", "N.5", true},
    {"\\boxed{\\sqrt{8}}", "2\\sqrt{2}", true},
    {"\\boxed{N\\sqrt{2}}", "\\sqrt{2}N", true},
    {"\\boxed{x^2+2 \\cdot Mx+M^2}", "(x+M)^2", true},
    {"\\boxed{\\frac{\\sqrt{3}}{M}}", "\\frac{1}{M}\\sqrt{3}", true},
    {"\\boxed{(0.5, N)}", "(\\frac{1}{2}, N)", true},
    {"\\boxed{\\frac{x^2-M^2}{x-M}}", "x+M", true},
    {"\\boxed{Nx+Mx}", "(N+M)x", true},
    {"<think>\\boxed{M}</think> \\boxed{N}", "N", true},
    {"\\boxed{M}", "N", false},
    {"\\boxed{-N}", "N", false},
    {"\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", false},  // unreduced
    {"\\boxed{[N,M)}", "[N,M]", false},
    {"\\boxed{x^2+M}", "(x+M)^2", false},
    {"\\boxed{N\\pi}", "N", false},
    {"\\boxed{\\sqrt{M}}", "M", false},
    {"\\boxed{(M, N)}", "(N, M)", false},
    {"\\boxed{\\frac{1}{3}}", "0.33", false},
    {"\\boxed{Nx+M}", "(N+M)x", false},
    {"The answer is N.", "N", false},
    {"\\boxed{\\frac{N}{M}", "\\frac{N}{M}", false},
    {"\\boxed{\\sqrt{x^2}}", "x", false},
    {"\\boxed{N.01}", "N", false},
};

std::string instantiate(std::string text, int n) {
  for (size_t at = text.find('N'); at != std::string::npos; at = text.find('N', at)) {
    text.replace(at, 1, std::to_string(n));
  }
  for (size_t at = text.find('M'); at != std::string::npos; at = text.find('M', at)) {
    text.replace(at, 1, std::to_string(n + 1));
  }
  return text;
}

std::vector<GradedCase> table() {
  std::vector<GradedCase> cases;
  for (int n = 1; n <= kVariants; ++n) {
    for (const Template& t : kTemplates) {
      cases.push_back({instantiate(t.response, n), instantiate(t.label, n), t.correct});
    }
  }
  return cases;
}

bool string_only_grade(const GradedCase& c) {
  const auto given = rollout::last_boxed_content(c.response);
  return given && rollout::strip_math_answer(*given) == rollout::strip_math_answer(c.label);
}

bool math_reward_grade(const GradedCase& c) {
  return rollout::math_reward(c.response, c.label) == 1.0;
}

// Best seconds of one pass over the table; also how many grades matched the intent.
double best_pass_seconds(const std::vector<GradedCase>& cases,
                         const std::function<bool(const GradedCase&)>& grade, int* right) {
  double best = 1e300;
  for (int repetition = 0; repetition <= kRepetitions; ++repetition) {
    int matched = 0;
    const auto start = Clock::now();
    for (const GradedCase& c : cases) matched += grade(c) == c.correct ? 1 : 0;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (repetition > 0) best = std::min(best, seconds);  // the first pass warms up
    *right = matched;
  }
  return best;
}

void print_line(const std::string& metric, double value, const std::string& unit, double baseline) {
  std::printf(
      "{\"bench\": \"reward\", \"metric\": \"%s\", \"value\": %.4g, \"unit\": \"%s\", "
      "\"baseline\": %.4g, \"ratio\": %.4g}\n",
      metric.c_str(), value, unit.c_str(), baseline, value / baseline);
  std::fflush(stdout);
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  const std::vector<GradedCase> cases = table();
  int reward_right = 0;
  int string_right = 0;
  const double reward_seconds = best_pass_seconds(cases, math_reward_grade, &reward_right);
  const double string_seconds = best_pass_seconds(cases, string_only_grade, &string_right);
  const double count = static_cast<double>(cases.size());
  print_line("math_reward", count / reward_seconds, "cases/s", count / string_seconds);
  print_line("correct_grades", reward_right / count, "fraction", string_right / count);
  return 0;
}
