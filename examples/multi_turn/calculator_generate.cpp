// A multi-turn generate function with a calculator tool, loaded by ooze with
//   --custom-generate-function-path build/libcalculator_generate.so:calculator_generate
//
// The policy calls the tool by writing <calc>EXPR</calc>, EXPR being integers, + - * /, unary
// minus and parentheses. Each turn, the function lets the policy write until it stops, finds the
// call in what it wrote since the last tool answer, and appends the answer as an observation:
//   <result>14</result>          exact: 7/2 answers 7/2, not 3 or 3.5
//   <result>error: division by zero</result>
// Observations are not the policy's tokens: they get loss mask 0, so the trainer does not learn
// to write them. The sample ends when a turn makes no call, when it is aborted, or when its
// response budget (--rollout-max-response-len) is spent. sample.metrics gets "turns" (policy
// turns) and "tool_calls" (calls answered), which the rollout reports as rollout/turns and
// rollout/tool_calls.
//
// The function holds no state, so ooze may run it on many samples at once.
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rollout/reward_plugin.h"

namespace {

using ooze::rollout::Sample;
using ooze::rollout::plugin::GenerationContext;

constexpr const char* kCallOpen = "<calc>";
constexpr const char* kCallClose = "</calc>";

// Tokens one policy turn may write: a turn that rambles this long without a call ends the
// sample rather than spending the whole budget in one turn.
constexpr int64_t kMaxTokensPerTurn = 512;
// What the evaluator accepts; longer or deeper expressions are refused, so a policy cannot make
// the tool slow or overflow the stack.
constexpr size_t kMaxExpressionLength = 256;
constexpr int kMaxNesting = 32;

// An error the policy sees as <result>error: MESSAGE</result>.
class CalcError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int64_t checked_add(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) throw CalcError("overflow (beyond 64-bit integers)");
  return sum;
}

int64_t checked_multiply(int64_t a, int64_t b) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) {
    throw CalcError("overflow (beyond 64-bit integers)");
  }
  return product;
}

int64_t checked_negate(int64_t a) { return checked_multiply(a, -1); }

// An exact value: numerator / denominator in lowest terms, denominator > 0. Division of
// integers stays exact instead of rounding.
struct Fraction {
  int64_t numerator = 0;
  int64_t denominator = 1;

  static Fraction of(int64_t numerator, int64_t denominator) {
    if (denominator == 0) throw CalcError("division by zero");
    if (denominator < 0) {
      numerator = checked_negate(numerator);
      denominator = checked_negate(denominator);
    }
    // Keeping the most negative value out lets every other step negate and take gcds safely.
    if (numerator == std::numeric_limits<int64_t>::min())
      throw CalcError("overflow (beyond 64-bit integers)");
    const int64_t divisor = std::gcd(numerator, denominator);  // >= 1: denominator > 0
    return {numerator / divisor, denominator / divisor};
  }

  Fraction operator+(const Fraction& other) const {
    const int64_t common = std::gcd(denominator, other.denominator);
    return of(checked_add(checked_multiply(numerator, other.denominator / common),
                          checked_multiply(other.numerator, denominator / common)),
              checked_multiply(denominator, other.denominator / common));
  }
  Fraction operator-() const { return {checked_negate(numerator), denominator}; }
  Fraction operator-(const Fraction& other) const { return *this + -other; }
  Fraction operator*(const Fraction& other) const {
    // Cross-cancelling first keeps the intermediate products small.
    const int64_t a = std::gcd(numerator, other.denominator);
    const int64_t b = std::gcd(other.numerator, denominator);
    return of(checked_multiply(numerator / a, other.numerator / b),
              checked_multiply(denominator / b, other.denominator / a));
  }
  Fraction operator/(const Fraction& other) const {
    if (other.numerator == 0) throw CalcError("division by zero");
    return *this * of(other.denominator, other.numerator);
  }

  std::string text() const {
    std::string whole = std::to_string(numerator);
    return denominator == 1 ? whole : whole + "/" + std::to_string(denominator);
  }
};

// Recursive descent over
//   expression := term (('+' | '-') term)*
//   term       := factor (('*' | '/') factor)*
//   factor     := ('+' | '-') factor | '(' expression ')' | digits
// with spaces allowed between tokens. Operators of one level associate to the left.
class Evaluator {
 public:
  explicit Evaluator(const std::string& text) : text_(text) {}

  Fraction evaluate() {
    if (text_.size() > kMaxExpressionLength) {
      throw CalcError("expression too long (" + std::to_string(text_.size()) +
                      " characters; at most " + std::to_string(kMaxExpressionLength) + ")");
    }
    skip_spaces();
    if (at_end()) throw CalcError("empty expression");
    Fraction value = expression(0);
    if (!at_end()) throw unexpected();
    return value;
  }

 private:
  Fraction expression(int depth) {
    Fraction value = term(depth);
    while (peek() == '+' || peek() == '-') {
      const char op = take();
      const Fraction right = term(depth);
      value = op == '+' ? value + right : value - right;
    }
    return value;
  }

  Fraction term(int depth) {
    Fraction value = factor(depth);
    while (peek() == '*' || peek() == '/') {
      const char op = take();
      const Fraction right = factor(depth);
      value = op == '*' ? value * right : value / right;
    }
    return value;
  }

  Fraction factor(int depth) {
    if (depth > kMaxNesting) {
      throw CalcError("nested too deeply (at most " + std::to_string(kMaxNesting) + " levels)");
    }
    if (peek() == '-' || peek() == '+') {
      const char sign = take();
      const Fraction value = factor(depth + 1);
      return sign == '-' ? -value : value;
    }
    if (peek() == '(') {
      take();
      const Fraction value = expression(depth + 1);
      if (peek() != ')') {
        if (at_end()) throw CalcError("missing ')' at the end of the expression");
        throw unexpected();
      }
      take();
      return value;
    }
    if (peek() >= '0' && peek() <= '9') return number();
    if (at_end()) throw CalcError("the expression ends where a number was expected");
    throw unexpected();
  }

  Fraction number() {
    int64_t value = 0;
    while (position_ < text_.size() && text_[position_] >= '0' && text_[position_] <= '9') {
      const int64_t digit = text_[position_++] - '0';
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, digit, &value)) {
        throw CalcError("number too large (beyond 64-bit integers)");
      }
    }
    skip_spaces();
    return {value, 1};
  }

  bool at_end() const { return position_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[position_]; }
  char take() {
    const char c = text_[position_++];
    skip_spaces();
    return c;
  }
  void skip_spaces() {
    while (!at_end() && (text_[position_] == ' ' || text_[position_] == '\t' ||
                         text_[position_] == '\n' || text_[position_] == '\r')) {
      ++position_;
    }
  }
  CalcError unexpected() const {
    const unsigned char c = static_cast<unsigned char>(text_[position_]);
    // Bytes outside printable ASCII are named by value: the answer must stay plain text.
    char what[16];
    std::snprintf(what, sizeof(what), c >= 0x20 && c < 0x7f ? "'%c'" : "byte 0x%02x", c);
    return CalcError(std::string("unexpected ") + what + " at character " +
                     std::to_string(position_ + 1));
  }

  const std::string& text_;
  size_t position_ = 0;
};

// The tool's answer to EXPR, as the observation the policy sees.
std::string tool_answer(const std::string& expression) {
  try {
    return "<result>" + Evaluator(expression).evaluate().text() + "</result>";
  } catch (const CalcError& error) {
    return std::string("<result>error: ") + error.what() + "</result>";
  }
}

// The first complete <calc>EXPR</calc> in `text`: EXPR and where the closing tag ends.
struct ToolCall {
  std::string expression;
  size_t end = 0;
};

std::optional<ToolCall> find_tool_call(const std::string& text) {
  const size_t open = text.find(kCallOpen);
  if (open == std::string::npos) return std::nullopt;
  const size_t start = open + std::char_traits<char>::length(kCallOpen);
  const size_t close = text.find(kCallClose, start);
  if (close == std::string::npos) return std::nullopt;
  return ToolCall{text.substr(start, close - start),
                  close + std::char_traits<char>::length(kCallClose)};
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What the policy wrote since the last observation, spelled from its tokens. The tokens, not
// the engine's text: with --rollout-stop '</calc>' the text ends before the stop string, while
// its tokens are in the sample. Starting at the last observation (loss mask 0) also covers a
// sample continued from a partial rollout, whose call may have begun before it was aborted.
std::string policy_text_since_last_observation(GenerationContext& context, const Sample& sample) {
  size_t start = sample.loss_mask.size();
  while (start > 0 && sample.loss_mask[start - 1] != 0) --start;
  const auto first = sample.tokens.end() - static_cast<std::ptrdiff_t>(sample.loss_mask.size()) +
                     static_cast<std::ptrdiff_t>(start);
  return context.detokenize(std::vector<int64_t>(first, sample.tokens.end()));
}

int64_t metric_so_far(const Sample& sample, const char* name) {
  auto found = sample.metrics.find(name);
  return found != sample.metrics.end() && found->is_number_integer() ? found->get<int64_t>() : 0;
}

}  // namespace

void calculator_generate(GenerationContext& context, Sample& sample) {
  // A sample continued from a partial rollout keeps counting where it stopped; when it was
  // stopped in the middle of a turn (its last token is the policy's), the first generate
  // finishes that turn rather than starting one.
  int64_t turns = metric_so_far(sample, "turns");
  int64_t tool_calls = metric_so_far(sample, "tool_calls");
  bool finishing_a_turn = !sample.loss_mask.empty() && sample.loss_mask.back() == 1;
  while (context.remaining_budget(sample) > 0) {
    const int64_t length_before = sample.response_length;
    context.generate(sample, kMaxTokensPerTurn);
    if (sample.response_length > length_before && !finishing_a_turn) ++turns;
    finishing_a_turn = false;
    if (sample.status == Sample::Status::kAborted) break;
    const std::string written = policy_text_since_last_observation(context, sample);
    const std::optional<ToolCall> call = find_tool_call(written);
    if (!call) break;
    // The stop string '</calc>' was cut from the text: put it back, so the response text
    // spells the response tokens.
    if (ends_with(written, kCallClose) && !ends_with(sample.response, kCallClose)) {
      sample.response += kCallClose;
    }
    if (context.remaining_budget(sample) == 0) break;
    context.append_observation(sample, tool_answer(call->expression));
    ++tool_calls;
  }
  sample.metrics["turns"] = turns;
  sample.metrics["tool_calls"] = tool_calls;
}
OOZE_EXPORT_GENERATE(calculator_generate)
