#include "python/python_values.h"

#include <stdexcept>
#include <string>

namespace py = pybind11;

namespace ooze::python {

py::object to_python(const std::string& text) {
  PyObject* decoded =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(decoded);
}

py::object to_python(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return py::none();
    case nlohmann::json::value_t::boolean:
      return py::bool_(value.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(value.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(value.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(value.get<double>());
    case nlohmann::json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      PyObject* decoded =
          PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
      if (decoded == nullptr) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(decoded);
    }
    case nlohmann::json::value_t::array: {
      py::list list(value.size());
      size_t i = 0;
      for (const nlohmann::json& item : value) list[i++] = to_python(item);
      return std::move(list);
    }
    case nlohmann::json::value_t::object: {
      py::dict dict;
      for (const auto& [key, item] : value.items()) dict[py::str(key)] = to_python(item);
      return std::move(dict);
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  throw std::invalid_argument("binary JSON values have no Python form here");
}

nlohmann::json from_python(py::handle value) {
  if (value.is_none()) return nullptr;
  if (PyBool_Check(value.ptr())) return value.cast<bool>();
  if (PyLong_Check(value.ptr())) {
    int overflow = 0;
    const long long number = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow != 0) {
      throw std::invalid_argument("the int " + py::repr(value).cast<std::string>() +
                                  " does not fit in 64 bits");
    }
    return static_cast<int64_t>(number);
  }
  if (PyFloat_Check(value.ptr())) return PyFloat_AS_DOUBLE(value.ptr());
  if (PyUnicode_Check(value.ptr())) return value.cast<std::string>();
  if (PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) {
    nlohmann::json list = nlohmann::json::array();
    for (py::handle item : value) list.push_back(from_python(item));
    return list;
  }
  if (PyDict_Check(value.ptr())) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& [key, item] : value.cast<py::dict>()) {
      if (!PyUnicode_Check(key.ptr())) {
        throw std::invalid_argument("a dict key that is not a str: " +
                                    py::repr(key).cast<std::string>());
      }
      object[key.cast<std::string>()] = from_python(item);
    }
    return object;
  }
  throw std::invalid_argument("a " + std::string(Py_TYPE(value.ptr())->tp_name) +
                              " cannot go to ooze (only None, bool, int, float, str, list, "
                              "tuple and dict)");
}

}  // namespace ooze::python
