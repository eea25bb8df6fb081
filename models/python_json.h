// JSON as Python's json.dumps(value, ensure_ascii=False) writes it: what the `tojson` filter of
// Hugging Face chat templates produces, and so the bytes a Qwen model saw in training for tool
// definitions and tool-call arguments. It differs from nlohmann's dump(): ", " and ": "
// separators, floats as Python's repr (1.0, 1e-05, 1e+16), control characters as \u00XX with
// lowercase hex, and non-ASCII text kept as it is.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ooze {
namespace models {

// Object keys are written in the order `value` holds them (insertion order for ordered_json,
// as a Python dict keeps them). NaN and infinities are written as Python does (NaN, Infinity,
// -Infinity); strings are written byte for byte apart from the escapes. With `indent` >= 0 it
// writes json.dumps(value, indent=INDENT, ensure_ascii=False): one element per line, "," and
// ": " separators, empty containers as [] and {}.
std::string python_json_dumps(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace models
}  // namespace ooze
