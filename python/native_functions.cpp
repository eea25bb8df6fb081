#include "python/native_functions.h"

#include <pybind11/embed.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "python/python_values.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

std::mutex registry_mutex;
std::map<std::string, std::shared_ptr<const NativeFunction>>& registry() {
  static auto* functions = new std::map<std::string, std::shared_ptr<const NativeFunction>>();
  return *functions;
}

py::object call(const std::string& name, py::handle input) {
  std::shared_ptr<const NativeFunction> function;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto found = registry().find(name);
    if (found == registry().end()) {
      throw Error("no native function '" + name + "' (ooze registers them while a run uses them)");
    }
    function = found->second;
  }
  nlohmann::json arguments = from_python(input);
  nlohmann::json answer;
  {
    py::gil_scoped_release release;
    answer = (*function)(arguments);
  }
  return to_python(answer);
}

}  // namespace

NativeFunctionRegistration::NativeFunctionRegistration(std::string name, NativeFunction function)
    : name_(std::move(name)) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (!registry()
           .emplace(name_, std::make_shared<const NativeFunction>(std::move(function)))
           .second) {
    throw Error("native function '" + name_ + "' is registered twice");
  }
}

NativeFunctionRegistration::~NativeFunctionRegistration() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().erase(name_);
}

}  // namespace ooze::python

// Registered with the interpreter before it starts (a static initialiser of this file, which the
// registrations above keep linked).
PYBIND11_EMBEDDED_MODULE(_ooze_native, module) {
  module.def("call", &ooze::python::call,
             "Runs a C++ function ooze registered: JSON text in and out.");
}
