#include "models/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace ooze {
namespace models {

namespace {

// json.dumps's string encoder (ensure_ascii=False): only the quote, the backslash and control
// characters are escaped.
void append_python_json_string(std::string& out, const std::string& text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned>(c));
          out += escape;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Python's repr(float): the shortest digits that read back as the same double, in fixed
// notation with at least one decimal (1.0, 0.0001) unless the decimal point would sit more than
// 16 places right of the first digit or 4 or more places left of it (1e+16, 1e-05).
std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string text(buffer, result.ptr);  // e.g. "-1.25e-05", "0e+00"
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const size_t e = text.find('e');
  std::string digits = text.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::atoi(text.c_str() + e + 1);
  const int point = exponent + 1;  // digits are 0.DIGITS * 10^point
  const int count = static_cast<int>(digits.size());
  std::string out;
  if (point <= -4 || point > 16) {
    out = digits.substr(0, 1);
    if (count > 1) out += "." + digits.substr(1);
    char tail[16];
    std::snprintf(tail, sizeof(tail), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += tail;
  } else if (point <= 0) {
    out = "0." + std::string(-point, '0') + digits;
  } else if (point >= count) {
    out = digits + std::string(point - count, '0') + ".0";
  } else {
    out = digits.substr(0, point) + "." + digits.substr(point);
  }
  return sign + out;
}

// Where the next element of a container goes: after a space (one line) or on its own line
// indented one level deeper than `depth` (indent >= 0).
void append_element_break(std::string& out, bool first, int indent, int depth) {
  if (indent < 0) {
    if (!first) out += ", ";
    return;
  }
  if (!first) out += ',';
  out += '\n' + std::string(static_cast<size_t>(indent) * (depth + 1), ' ');
}

void append_closing_break(std::string& out, int indent, int depth) {
  if (indent >= 0) out += '\n' + std::string(static_cast<size_t>(indent) * depth, ' ');
}

void append_python_json(std::string& out, const nlohmann::ordered_json& value, int indent,
                        int depth) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null:
      out += "null";
      return;
    case Type::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case Type::number_integer:
      out += std::to_string(value.get<int64_t>());
      return;
    case Type::number_unsigned:
      out += std::to_string(value.get<uint64_t>());
      return;
    case Type::number_float:
      out += python_float_repr(value.get<double>());
      return;
    case Type::string:
      append_python_json_string(out, value.get_ref<const std::string&>());
      return;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& element : value) {
        append_element_break(out, first, indent, depth);
        first = false;
        append_python_json(out, element, indent, depth + 1);
      }
      if (!first) append_closing_break(out, indent, depth);
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        append_element_break(out, first, indent, depth);
        first = false;
        append_python_json_string(out, it.key());
        out += ": ";
        append_python_json(out, it.value(), indent, depth + 1);
      }
      if (!first) append_closing_break(out, indent, depth);
      out += '}';
      return;
    }
    case Type::binary:
    case Type::discarded:
      break;
  }
  throw Error("python_json_dumps: a JSON value of type " + std::string(value.type_name()) +
              " has no Python JSON form");
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  append_python_json(out, value, indent, 0);
  return out;
}

}  // namespace models
}  // namespace ooze
