#include "python/python_hook.h"

#include <pybind11/embed.h>

#include "python/interpreter.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

py::module_ runtime() { return py::module_::import("ooze._hook_runtime"); }

// The message of a HookError raised by the runtime is already whole; anything else is a
// Python error in ooze's own runtime, shown with its traceback.
std::string message_of(py::error_already_set& error) {
  if (error.matches(runtime().attr("HookError"))) return py::str(error.value()).cast<std::string>();
  return error.what();
}

}  // namespace

PythonHook PythonHook::load(const std::string& path, const std::string& flag,
                            const std::vector<std::string>& parameters) {
  ensure_started();
  py::gil_scoped_acquire gil;
  PythonHook hook;
  hook.path_ = path;
  hook.flag_ = flag;
  try {
    py::object loaded = runtime().attr("load_hook")(path, flag, nlohmann::json(parameters).dump());
    hook.is_async_ = loaded.attr("is_async").cast<bool>();
    hook.hook_ = loaded.release().ptr();
  } catch (py::error_already_set& error) {
    throw HookError(message_of(error));
  }
  return hook;
}

nlohmann::json PythonHook::call(const char* operation, const nlohmann::json& input) const {
  std::string answer;
  {
    py::gil_scoped_acquire gil;
    try {
      py::handle hook(static_cast<PyObject*>(hook_));
      // Invalid UTF-8 (a response cut inside a character) reaches Python as U+FFFD, not an error.
      const std::string text = input.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      answer = runtime().attr(operation)(hook, text).cast<std::string>();
    } catch (py::error_already_set& error) {
      throw HookError(flag_ + " " + path_ + ": " + message_of(error));
    }
  }
  return nlohmann::json::parse(answer);
}

}  // namespace ooze::python
