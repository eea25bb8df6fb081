#include "python/hook_args.h"

#include <pybind11/embed.h>

#include <mutex>

#include "python/interpreter.h"
#include "python/python_hook.h"
#include "python/python_values.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

std::mutex flags_mutex;
nlohmann::json flags = nlohmann::json::object();

}  // namespace

void set_hook_args(const nlohmann::json& new_flags) {
  {
    std::lock_guard<std::mutex> lock(flags_mutex);
    flags = new_flags;
  }
  if (is_started()) apply_hook_args();
}

void apply_hook_args() {
  nlohmann::json copy;
  {
    std::lock_guard<std::mutex> lock(flags_mutex);
    copy = flags;
  }
  py::gil_scoped_acquire gil;
  try {
    py::module_::import("ooze._hook_runtime").attr("set_args")(to_python(copy));
  } catch (py::error_already_set& error) {
    throw HookError("cannot hand the run's flags to Python hooks: " + std::string(error.what()));
  }
}

}  // namespace ooze::python
