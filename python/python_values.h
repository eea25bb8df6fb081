// JSON values and Python objects, converted directly, with no JSON text between them: what
// crosses between ooze and hooks. Internal to python/ (pybind11 types); every call needs the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>

namespace ooze::python {

// null -> None, booleans, integers, floats, strings (ill-formed UTF-8 decoded with U+FFFD, as a
// response cut inside a character may be), arrays -> lists, objects -> dicts.
pybind11::object to_python(const nlohmann::json& value);

// A str from UTF-8 text, ill-formed bytes decoded as U+FFFD.
pybind11::object to_python(const std::string& text);

// The reverse, for None, bool, int (64-bit), float, str, list and tuple, and dicts with str keys.
// Throws std::invalid_argument naming what cannot be carried (another type, a huge int).
nlohmann::json from_python(pybind11::handle value);

}  // namespace ooze::python
