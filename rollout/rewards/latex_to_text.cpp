#include "rollout/rewards/latex_to_text.h"

#include <unordered_map>

#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

const std::unordered_map<std::string, std::string>& symbol_commands() {
  static const auto* table = new std::unordered_map<std::string, std::string>{
      {"pi", "pi"},         {"infty", "inf"},     {"infin", "inf"},     {"cup", "U"},
      {"cdot", "*"},        {"times", "*"},       {"ast", "*"},         {"div", "/"},
      {"pm", "±"},          {"mp", "∓"},          {"le", "<="},         {"leq", "<="},
      {"leqslant", "<="},   {"ge", ">="},         {"geq", ">="},        {"geqslant", ">="},
      {"ne", "!="},         {"neq", "!="},        {"lt", "<"},          {"gt", ">"},
      {"approx", "≈"},      {"in", "∈"},          {"cap", "∩"},         {"emptyset", "∅"},
      {"varnothing", "∅"},  {"circ", ""},         {"degree", ""},       {"prime", "'"},
      {"ldots", "..."},     {"dots", "..."},      {"cdots", "..."},     {"dotsc", "..."},
      {"quad", " "},        {"qquad", " "},       {"displaystyle", ""}, {"textstyle", ""},
      {"limits", ""},       {"nolimits", ""},     {"colon", ":"},       {"mid", "|"},
      {"vert", "|"},        {"lvert", "|"},       {"rvert", "|"},       {"langle", "<"},
      {"rangle", ">"},      {"lbrace", "{"},      {"rbrace", "}"},      {"lbrack", "["},
      {"rbrack", "]"},      {"sin", "sin"},       {"cos", "cos"},       {"tan", "tan"},
      {"cot", "cot"},       {"sec", "sec"},       {"csc", "csc"},       {"arcsin", "arcsin"},
      {"arccos", "arccos"}, {"arctan", "arctan"}, {"sinh", "sinh"},     {"cosh", "cosh"},
      {"tanh", "tanh"},     {"log", "log"},       {"ln", "ln"},         {"lg", "lg"},
      {"exp", "exp"},       {"min", "min"},       {"max", "max"},       {"gcd", "gcd"},
      {"lcm", "lcm"},       {"det", "det"},       {"deg", "deg"},       {"alpha", "α"},
      {"beta", "β"},        {"gamma", "γ"},       {"delta", "δ"},       {"epsilon", "ϵ"},
      {"varepsilon", "ε"},  {"zeta", "ζ"},        {"eta", "η"},         {"theta", "θ"},
      {"vartheta", "ϑ"},    {"iota", "ι"},        {"kappa", "κ"},       {"lambda", "λ"},
      {"mu", "μ"},          {"nu", "ν"},          {"xi", "ξ"},          {"rho", "ρ"},
      {"sigma", "σ"},       {"tau", "τ"},         {"upsilon", "υ"},     {"phi", "ϕ"},
      {"varphi", "φ"},      {"chi", "χ"},         {"psi", "ψ"},         {"omega", "ω"},
      {"Gamma", "Γ"},       {"Delta", "Δ"},       {"Theta", "Θ"},       {"Lambda", "Λ"},
      {"Xi", "Ξ"},          {"Pi", "Π"},          {"Sigma", "Σ"},       {"Phi", "Φ"},
      {"Psi", "Ψ"},         {"Omega", "Ω"},
  };
  return *table;
}

// Commands whose one argument stands for itself in plain text (fonts, text, accents).
bool is_content_command(const std::string& name) {
  static const char* const kNames[] = {
      "text",         "textbf",  "textit",    "textrm",    "textsf",     "texttt",         "textup",
      "textnormal",   "mbox",    "mathrm",    "mathbf",    "mathit",     "mathsf",         "mathtt",
      "mathbb",       "mathcal", "mathscr",   "mathfrak",  "mathnormal", "boldsymbol",     "bm",
      "operatorname", "emph",    "overline",  "underline", "hat",        "widehat",        "bar",
      "vec",          "tilde",   "widetilde", "dot",       "ddot",       "overrightarrow", "pmb",
  };
  for (const char* known : kNames) {
    if (name == known) return true;
  }
  return false;
}

bool is_delimiter_size_command(const std::string& name) {
  static const char* const kNames[] = {"left", "right", "middle", "big",   "Big",
                                       "bigg", "Bigg",  "bigl",   "bigr",  "Bigl",
                                       "Bigr", "biggl", "biggr",  "Biggl", "Biggr"};
  for (const char* known : kNames) {
    if (name == known) return true;
  }
  return false;
}

// A number or a single character stays bare; anything longer gets parentheses, so that
// \frac{a}{bc} reads a/(bc) and x^{ab} reads x^(ab).
std::string wrap(const std::string& text) {
  const std::string trimmed = trim_ascii(text);
  if (trimmed.empty()) return "()";
  bool number = true;
  for (char c : trimmed) {
    if (!is_ascii_digit(c) && c != '.') number = false;
  }
  if (number || utf8_sequence_length(trimmed, 0) == trimmed.size()) return trimmed;
  return "(" + trimmed + ")";
}

class Converter {
 public:
  explicit Converter(const std::string& text) : text_(text) {}

  std::optional<std::string> run() {
    std::string out = sequence(false);
    if (failed_) return std::nullopt;
    return out;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }

  void skip_spaces() {
    while (!at_end() && is_ascii_space(text_[pos_])) ++pos_;
  }

  // Up to the end of the text, or (in a group) up to and past its closing brace.
  std::string sequence(bool in_group) {
    if (++depth_ > kMaxLatexNesting) {
      failed_ = true;
      pos_ = text_.size();
      return "";
    }
    std::string out;
    while (!at_end() && !failed_) {
      const char c = text_[pos_];
      if (c == '}' && in_group) {
        ++pos_;
        break;
      }
      if (c == '{') {
        ++pos_;
        out += sequence(true);
      } else if (c == '\\') {
        out += command();
      } else if (c == '^' || c == '_') {
        ++pos_;
        const std::string script = argument();
        if (!trim_ascii(script).empty()) out += c + wrap(script);  // "^\circ" leaves nothing
      } else {
        const size_t length = utf8_sequence_length(text_, pos_);
        out.append(text_, pos_, length);
        pos_ += length;
      }
    }
    --depth_;
    return out;
  }

  // A command's argument: a braced group, a command, or one character.
  std::string argument() {
    skip_spaces();
    if (at_end()) return "";
    if (text_[pos_] == '{') {
      ++pos_;
      return sequence(true);
    }
    if (text_[pos_] == '\\') return command();
    const size_t length = utf8_sequence_length(text_, pos_);
    std::string one = text_.substr(pos_, length);
    pos_ += length;
    return one;
  }

  // \sqrt's optional [degree], converted; empty when absent.
  std::string optional_degree() {
    skip_spaces();
    if (at_end() || text_[pos_] != '[') return "";
    const size_t open = pos_;
    int depth = 0;
    for (size_t i = open; i < text_.size(); ++i) {
      if (text_[i] == '{') ++depth;
      if (text_[i] == '}') --depth;
      if (text_[i] == ']' && depth == 0) {
        pos_ = i + 1;
        const std::string inside = text_.substr(open + 1, i - open - 1);
        Converter inner(inside);
        inner.depth_ = depth_;
        auto converted = inner.run();
        if (!converted) failed_ = true;
        return converted ? *converted : "";
      }
    }
    return "";  // no closing bracket: read it as ordinary text
  }

  std::string command() {
    ++pos_;  // the backslash
    if (at_end()) return "";
    if (!is_ascii_letter(text_[pos_])) {
      const char symbol = text_[pos_++];
      switch (symbol) {
        case ',':
        case ';':
        case ':':
        case ' ':
        case '\\':
          return " ";
        case '!':
          return "";
        default:
          return std::string(1, symbol);  // \{ \} \% \$ \& \# \_
      }
    }
    const size_t start = pos_;
    while (!at_end() && is_ascii_letter(text_[pos_])) ++pos_;
    const std::string name = text_.substr(start, pos_ - start);

    if (name == "frac" || name == "dfrac" || name == "tfrac" || name == "cfrac") {
      const std::string numerator = argument();
      const std::string denominator = argument();
      return " " + wrap(numerator) + "/" + wrap(denominator);
    }
    if (name == "sqrt") {
      const std::string degree = optional_degree();
      const std::string radicand = argument();
      if (degree.empty()) return "sqrt(" + radicand + ")";
      return "(" + radicand + ")^(1/" + wrap(degree) + ")";
    }
    if (is_content_command(name)) return argument();
    if (is_delimiter_size_command(name)) {
      skip_spaces();
      if (!at_end() && text_[pos_] == '.') ++pos_;  // \left. is an invisible delimiter
      return "";
    }
    const auto& symbols = symbol_commands();
    const auto known = symbols.find(name);
    if (known != symbols.end()) return known->second;
    return "";  // unknown: its braced arguments follow as plain groups
  }

  const std::string& text_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool failed_ = false;
};

}  // namespace

std::optional<std::string> latex_to_text(const std::string& latex) {
  if (latex.size() > kMaxLatexBytes) return std::nullopt;
  return Converter(latex).run();
}

}  // namespace ooze::rollout
