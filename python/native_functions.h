// C++ functions that hooks reach through ooze's Python package: ooze registers them by name
// (the run's engines, its tokenizer), and `_ooze_native.call(name, value)` runs one with the
// GIL released, so other hooks and coroutines go on while C++ works.
//
//   python::NativeFunctionRegistration encode("rollout-3/tokenize", [&](const nlohmann::json& in) {
//     return nlohmann::json(tokenizer.encode(in.get<std::string>()));
//   });                                 // registered until `encode` goes out of scope
//
// A function's exception reaches Python as RuntimeError with its message. Thread-safe.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace ooze::python {

using NativeFunction = std::function<nlohmann::json(const nlohmann::json&)>;

class NativeFunctionRegistration {
 public:
  // Throws Error when `name` is already registered.
  NativeFunctionRegistration(std::string name, NativeFunction function);
  ~NativeFunctionRegistration();
  NativeFunctionRegistration(const NativeFunctionRegistration&) = delete;
  NativeFunctionRegistration& operator=(const NativeFunctionRegistration&) = delete;

 private:
  std::string name_;
};

}  // namespace ooze::python
