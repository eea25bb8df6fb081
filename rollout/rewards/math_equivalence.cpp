#include "rollout/rewards/math_equivalence.h"

#include <ginac/ginac.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "rollout/rewards/latex_to_text.h"
#include "rollout/rewards/math_normalization.h"
#include "rollout/rewards/python_unicode.h"
#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

using GiNaC::ex;
using GiNaC::numeric;

// Thrown inside the parser when the text is not an expression it reads, or exceeds a bound.
struct NotAnExpression {};

std::mutex& ginac_mutex() {
  static std::mutex mutex;
  return mutex;
}

// A parsed subexpression and an upper bound on its polynomial degree (what normal() expands).
struct Term {
  ex value;
  int degree = 0;
};

int bounded_degree(long long degree) {
  if (degree > kMaxSymbolicDegree) throw NotAnExpression{};
  return static_cast<int>(degree);
}

// Variables by name, shared by both sides of a comparison so that "x" is one symbol.
class Variables {
 public:
  ex get(const std::string& name) {
    auto found = symbols_.find(name);
    if (found != symbols_.end()) return found->second;
    if (static_cast<int>(symbols_.size()) >= kMaxSymbolicVariables) throw NotAnExpression{};
    return symbols_.emplace(name, GiNaC::symbol(name)).first->second;
  }
  const std::map<std::string, GiNaC::symbol>& all() const { return symbols_; }

 private:
  std::map<std::string, GiNaC::symbol> symbols_;
};

enum class Function {
  kSqrt,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kTanh,
  kLog,
  kExp
};

struct NamedFunction {
  const char* name;
  Function function;
};

// Longest names first: "sinh" before "sin", "arcsin" before "asin".
constexpr NamedFunction kFunctions[] = {
    {"arcsin", Function::kAsin}, {"arccos", Function::kAcos}, {"arctan", Function::kAtan},
    {"sqrt", Function::kSqrt},   {"sinh", Function::kSinh},   {"cosh", Function::kCosh},
    {"tanh", Function::kTanh},   {"asin", Function::kAsin},   {"acos", Function::kAcos},
    {"atan", Function::kAtan},   {"sin", Function::kSin},     {"cos", Function::kCos},
    {"tan", Function::kTan},     {"log", Function::kLog},     {"exp", Function::kExp},
    {"ln", Function::kLog},
};

class ExpressionParser {
 public:
  ExpressionParser(const std::string& text, Variables& variables)
      : text_(text), variables_(variables) {}

  ex parse() {
    Term result = sum();
    skip_spaces();
    if (pos_ != text_.size()) throw NotAnExpression{};
    return result.value;
  }

 private:
  static constexpr int kMaxNesting = 100;

  void skip_spaces() {
    while (pos_ < text_.size() && is_ascii_space(text_[pos_])) ++pos_;
  }

  bool at(const char* token) {
    skip_spaces();
    return text_.compare(pos_, std::char_traits<char>::length(token), token) == 0;
  }

  bool take(const char* token) {
    if (!at(token)) return false;
    pos_ += std::char_traits<char>::length(token);
    return true;
  }

  struct Nesting {
    explicit Nesting(int& depth) : depth_(depth) {
      if (++depth_ > kMaxNesting) throw NotAnExpression{};
    }
    ~Nesting() { --depth_; }
    int& depth_;
  };

  Term sum() {
    Nesting nesting(depth_);
    Term result = signed_product();
    while (true) {
      if (take("+")) {
        Term right = signed_product();
        result = {result.value + right.value, std::max(result.degree, right.degree)};
      } else if (take("-") || take("−")) {
        Term right = signed_product();
        result = {result.value - right.value, std::max(result.degree, right.degree)};
      } else {
        return result;
      }
    }
  }

  Term signed_product() {
    if (take("+")) return signed_product();
    if (take("-") || take("−")) {
      Term operand = signed_product();
      return {-operand.value, operand.degree};
    }
    return product();
  }

  bool starts_factor() {
    skip_spaces();
    if (pos_ >= text_.size()) return false;
    const char c = text_[pos_];
    if (is_ascii_digit(c) || is_ascii_letter(c) || c == '.' || c == '(' || c == '[') return true;
    if (static_cast<unsigned char>(c) < 0x80) return false;
    return !at("·") && !at("×") && !at("÷") && !at("−");
  }

  Term product() {
    Term result = power();
    while (true) {
      if (take("*") || take("·") || take("×")) {
        Term right = signed_power();
        result = {result.value * right.value, bounded_degree(result.degree + right.degree)};
      } else if (take("/") || take("÷")) {
        Term right = signed_power();
        result = {result.value / right.value, bounded_degree(result.degree + right.degree)};
      } else if (starts_factor()) {
        Term right = power();
        result = {result.value * right.value, bounded_degree(result.degree + right.degree)};
      } else {
        return result;
      }
    }
  }

  Term power() {
    Nesting nesting(depth_);
    Term base = primary();
    if (!take("^") && !take("**")) return base;
    Term exponent = signed_power();
    return raise(base, exponent);
  }

  // An exponent: a signed power, so 2^-1 and 2^3^2 = 2^(3^2) read as usual.
  Term signed_power() {
    if (take("+")) return signed_power();
    if (take("-") || take("−")) {
      Term operand = signed_power();
      return {-operand.value, operand.degree};
    }
    return power();
  }

  static int bits(const numeric& rational) {
    return rational.numer().int_length() + rational.denom().int_length();
  }

  Term raise(const Term& base, const Term& exponent) {
    if (!GiNaC::is_a<numeric>(exponent.value) ||
        !GiNaC::ex_to<numeric>(exponent.value).is_rational()) {
      // A symbolic or irrational exponent: the power is an atom to normal().
      const int degree = (base.degree > 0 || exponent.degree > 0) ? 1 : 0;
      return {GiNaC::pow(base.value, exponent.value), degree};
    }
    const numeric e = GiNaC::ex_to<numeric>(exponent.value);
    const numeric size = GiNaC::abs(e.numer());
    if (GiNaC::is_a<numeric>(base.value)) {
      const numeric b = GiNaC::ex_to<numeric>(base.value);
      if (b.is_zero() && e.is_negative()) throw NotAnExpression{};  // 0^-1
      const bool trivial = b.is_zero() || b == numeric(1) || b == numeric(-1);
      if (!trivial && (!b.is_rational() || size > numeric(kMaxSymbolicPowerBits) ||
                       size.to_long() * bits(b) > kMaxSymbolicPowerBits)) {
        throw NotAnExpression{};
      }
      return {GiNaC::pow(base.value, exponent.value), 0};
    }
    if (size > numeric(64)) throw NotAnExpression{};
    const long long degree =
        base.degree == 0 ? 0 : std::max<long long>(1, base.degree * size.to_long());
    return {GiNaC::pow(base.value, exponent.value), bounded_degree(degree)};
  }

  Term number() {
    std::string digits;
    long long scale = 0;  // power of ten
    while (pos_ < text_.size() && is_ascii_digit(text_[pos_])) digits += text_[pos_++];
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      while (pos_ < text_.size() && is_ascii_digit(text_[pos_])) {
        digits += text_[pos_++];
        --scale;
      }
    }
    if (digits.empty()) throw NotAnExpression{};
    // An exponent only when digits follow the e: "2e" is 2 times e.
    if (pos_ + 1 < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      size_t look = pos_ + 1;
      bool negative = false;
      if (text_[look] == '+' || text_[look] == '-') negative = text_[look++] == '-';
      if (look < text_.size() && is_ascii_digit(text_[look])) {
        long long exponent = 0;
        while (look < text_.size() && is_ascii_digit(text_[look])) {
          exponent = exponent * 10 + (text_[look++] - '0');
          if (exponent > 1000) throw NotAnExpression{};
        }
        scale += negative ? -exponent : exponent;
        pos_ = look;
      }
    }
    const size_t first = digits.find_first_not_of('0');
    digits = first == std::string::npos ? "0" : digits.substr(first);
    const numeric mantissa(digits.c_str());
    return {mantissa * GiNaC::pow(numeric(10), numeric(scale)), 0};
  }

  Term apply(Function function, const Term& argument) {
    const ex& x = argument.value;
    const int degree = argument.degree > 0 ? 1 : 0;
    switch (function) {
      case Function::kSqrt:
        return raise(argument, Term{numeric(1, 2), 0});
      case Function::kSin:
        return {GiNaC::sin(x), degree};
      case Function::kCos:
        return {GiNaC::cos(x), degree};
      case Function::kTan:
        return {GiNaC::tan(x), degree};
      case Function::kAsin:
        return {GiNaC::asin(x), degree};
      case Function::kAcos:
        return {GiNaC::acos(x), degree};
      case Function::kAtan:
        return {GiNaC::atan(x), degree};
      case Function::kSinh:
        return {GiNaC::sinh(x), degree};
      case Function::kCosh:
        return {GiNaC::cosh(x), degree};
      case Function::kTanh:
        return {GiNaC::tanh(x), degree};
      case Function::kLog:
        return {GiNaC::log(x), degree};
      case Function::kExp:
        return {GiNaC::exp(x), degree};
    }
    throw NotAnExpression{};
  }

  Term signed_primary() {
    if (take("-") || take("−")) {
      Term operand = signed_primary();
      return {-operand.value, operand.degree};
    }
    return primary();
  }

  // A function's argument: parenthesised, or the factor right after it ("sqrt2", "sinx").
  Term function_argument() { return primary(); }

  Term group(char close) {
    Term inside = sum();
    skip_spaces();
    if (pos_ >= text_.size() || text_[pos_] != close) throw NotAnExpression{};
    ++pos_;
    return inside;
  }

  // A variable: one letter, with an optional subscript "_1", "_ab" or "_(...)".
  Term variable(const std::string& letter) {
    std::string name = letter;
    if (pos_ < text_.size() && text_[pos_] == '_') {
      size_t end = pos_ + 1;
      if (end < text_.size() && text_[end] == '(') {
        const size_t close = text_.find(')', end);
        if (close == std::string::npos) throw NotAnExpression{};
        end = close + 1;
      } else {
        while (end < text_.size() && (is_ascii_digit(text_[end]) || is_ascii_letter(text_[end]))) {
          ++end;
        }
      }
      if (end == pos_ + 1) throw NotAnExpression{};
      name += text_.substr(pos_, end - pos_);
      pos_ = end;
    }
    return {variables_.get(name), 1};
  }

  Term primary() {
    Nesting nesting(depth_);
    skip_spaces();
    if (pos_ >= text_.size()) throw NotAnExpression{};
    const char c = text_[pos_];
    if (is_ascii_digit(c) ||
        (c == '.' && pos_ + 1 < text_.size() && is_ascii_digit(text_[pos_ + 1]))) {
      return number();
    }
    if (c == '(') {
      ++pos_;
      return group(')');
    }
    if (c == '[') {
      ++pos_;
      return group(']');
    }
    if (take("π")) return {GiNaC::Pi, 0};
    if (take("∞")) return variable("∞");
    if (take("√")) return apply(Function::kSqrt, function_argument());
    if (is_ascii_letter(c)) {
      for (const NamedFunction& named : kFunctions) {
        if (text_.compare(pos_, std::char_traits<char>::length(named.name), named.name) == 0) {
          pos_ += std::char_traits<char>::length(named.name);
          // "sin^2 x" is (sin x)^2.
          if (!take("^")) return apply(named.function, function_argument());
          const Term exponent = signed_primary();
          return raise(apply(named.function, function_argument()), exponent);
        }
      }
      if (text_.compare(pos_, 2, "pi") == 0) {
        pos_ += 2;
        return {GiNaC::Pi, 0};
      }
      if (text_.compare(pos_, 3, "inf") == 0) {
        pos_ += 3;
        if (text_.compare(pos_, 2, "ty") == 0) pos_ += 2;
        return variable("∞");
      }
      ++pos_;
      // e is Euler's number unless subscripted (e_1); other letters are variables.
      if (c == 'e' && (pos_ >= text_.size() || text_[pos_] != '_')) return {GiNaC::exp(ex(1)), 0};
      return variable(std::string(1, c));
    }
    if (static_cast<unsigned char>(c) >= 0x80) {
      const size_t length = utf8_sequence_length(text_, pos_);
      // Slime's sympy parser reads Python syntax, where a digit outside ASCII (４, ٤) is an
      // invalid character: the whole check fails rather than reading it as a variable.
      if (python_decimal_value(code_point_at(text_, pos_).value) >= 0) throw NotAnExpression{};
      const std::string letter = text_.substr(pos_, length);
      pos_ += length;
      return variable(letter);  // a Greek letter or another symbol
    }
    throw NotAnExpression{};
  }

  const std::string& text_;
  Variables& variables_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// LaTeX goes through the plain-text converter first.
std::optional<std::string> plain_expression(const std::string& text) {
  if (text.size() > kMaxSymbolicExpressionBytes) return std::nullopt;
  if (!contains(text, "\\") && !contains(text, "{")) return text;
  std::optional<std::string> plain = latex_to_text(text);
  if (!plain || plain->size() > kMaxSymbolicExpressionBytes) return std::nullopt;
  return plain;
}

// |a - b| <= tolerance * max(1, |a|, |b|) once both evaluate to numbers.
bool numerically_close(const ex& a, const ex& b) {
  const ex a_value = a.evalf();
  const ex b_value = b.evalf();
  if (!GiNaC::is_a<numeric>(a_value) || !GiNaC::is_a<numeric>(b_value)) return false;
  const numeric x = GiNaC::ex_to<numeric>(a_value);
  const numeric y = GiNaC::ex_to<numeric>(b_value);
  numeric scale = std::max(GiNaC::abs(x), GiNaC::abs(y));
  if (scale < numeric(1)) scale = numeric(1);
  return GiNaC::abs(x - y) <= numeric("1e-20") * scale;
}

// Three assignments of distinct rationals of both signs (negative ones catch sqrt(x^2) vs x).
bool equal_at_probe_points(const ex& a, const ex& b, const Variables& variables) {
  static const long kNumerators[] = {7, -11, 19, -5, 13, 3, -17, 23, 2, -29, 31, 37};
  static const long kDenominators[] = {13, 17, 23, 7, 11, 29, 5, 19, 31, 3, 41, 43};
  int evaluated = 0;
  for (int probe = 0; probe < 3; ++probe) {
    GiNaC::exmap values;
    int index = probe;
    for (const auto& [name, symbol] : variables.all()) {
      values[symbol] = numeric(kNumerators[index % 12], kDenominators[(index * 5 + 1) % 12]);
      index += 3;
    }
    try {
      if (!numerically_close(a.subs(values), b.subs(values))) return false;
      ++evaluated;
    } catch (const std::exception&) {
      // A pole at this point (1/x at 0, tan at pi/2): it says nothing either way.
    }
  }
  return evaluated >= 2;
}

bool equal_expressions(const std::string& a, const std::string& b) {
  Variables variables;
  const ex left = ExpressionParser(a, variables).parse();
  const ex right = ExpressionParser(b, variables).parse();
  const ex difference = left - right;
  if (difference.is_zero()) return true;
  bool has_variables = false;
  for (const auto& [name, symbol] : variables.all()) {
    if (difference.has(symbol)) has_variables = true;
  }
  if (!has_variables) return numerically_close(left, right);
  if (difference.normal().is_zero()) return true;
  return equal_at_probe_points(left, right, variables);
}

std::string trimmed_element(const std::string& text, size_t begin, size_t end) {
  return trim_ascii(text.substr(begin, end - begin));
}

}  // namespace

bool symbolically_equal(const std::string& a, const std::string& b) {
  const std::optional<std::string> left = plain_expression(a);
  const std::optional<std::string> right = plain_expression(b);
  if (!left || !right || trim_ascii(*left).empty() || trim_ascii(*right).empty()) return false;
  std::lock_guard<std::mutex> lock(ginac_mutex());
  const long saved_digits = GiNaC::Digits;
  GiNaC::Digits = 30;
  bool equal = false;
  try {
    equal = equal_expressions(*left, *right);
  } catch (...) {  // NotAnExpression, GiNaC's pole and range errors, CLN's
    equal = false;
  }
  GiNaC::Digits = saved_digits;
  return equal;
}

std::vector<std::string> split_tuple(const std::string& answer) {
  const std::string text = strip_thousands_separators(answer);
  if (text.empty()) return {};
  const auto opens = [](char c) { return c == '(' || c == '['; };
  const auto closes = [](char c) { return c == ')' || c == ']'; };
  if (text.size() <= 2 || !opens(text.front()) || !closes(text.back())) return {text};
  // The first bracket must close at the very end: "(1)+(2)" is not a tuple.
  std::vector<size_t> commas;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (opens(text[i])) ++depth;
    if (closes(text[i])) {
      --depth;
      if (depth == 0 && i + 1 != text.size()) return {text};
    }
    if (text[i] == ',' && depth == 1) commas.push_back(i);
  }
  if (depth != 0) return {text};
  std::vector<std::string> elements;
  size_t begin = 1;
  for (size_t comma : commas) {
    elements.push_back(trimmed_element(text, begin, comma));
    begin = comma + 1;
  }
  elements.push_back(trimmed_element(text, begin, text.size() - 1));
  return elements;
}

bool normalized_answers_equivalent(const std::string& given, const std::string& truth) {
  if (given == truth) return true;
  if (given.empty() || truth.empty()) return false;
  const std::vector<std::string> truth_elements = split_tuple(truth);
  const std::vector<std::string> given_elements = split_tuple(given);
  if (truth_elements.size() > 1 &&
      (truth.front() != given.front() || truth.back() != given.back())) {
    return false;  // (1, 3) is not [1, 3)
  }
  if (truth_elements.size() != given_elements.size()) return false;
  for (size_t i = 0; i < truth_elements.size(); ++i) {
    const std::string& t = truth_elements[i];
    const std::string& g = given_elements[i];
    if (t == g) continue;
    if (is_fraction_text(t) && is_fraction_text(g)) return false;  // 2/4 is not 1/2 here
    if (is_integer_text(t) != is_integer_text(g)) return false;    // nor is 4/2 an integer
    if (!symbolically_equal(g, t)) return false;
  }
  return true;
}

}  // namespace ooze::rollout
