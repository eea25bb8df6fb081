#include "python/native_functions.h"

#include <pybind11/embed.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

std::mutex registry_mutex;
std::map<std::string, std::shared_ptr<const NativeFunction>>& registry() {
  static auto* functions = new std::map<std::string, std::shared_ptr<const NativeFunction>>();
  return *functions;
}

std::string call(const std::string& name, const std::string& input) {
  std::shared_ptr<const NativeFunction> function;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto found = registry().find(name);
    if (found == registry().end()) {
      throw Error("no native function '" + name + "' (ooze registers them while a run uses them)");
    }
    function = found->second;
  }
  py::gil_scoped_release release;
  return (*function)(nlohmann::json::parse(input))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
