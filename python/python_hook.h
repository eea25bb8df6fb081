// A user's Python function named by a hook flag (--custom-rm-path my_rewards.reward_func),
// loaded once and kept for the life of the process, as a plugin library is.
//
//   PythonHook reward = PythonHook::load(path, "--custom-rm-path", {"args", "sample"});
//   nlohmann::json outcomes = reward.call("reward_each", samples_json);
//
// Loading checks everything that can be checked before a run starts: the file or module, the
// attribute, that it is callable, and that it accepts the arguments ooze passes. call() runs
// one of ooze's hook operations (python/ooze/_hook_runtime.py) on the hook with JSON in and out:
// samples travel as JSON text, so the hook gets plain Python objects and ooze gets back only
// what it checked. Thread-safe: each call takes the GIL.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace ooze::python {

// A hook that cannot load, raised, or returned the wrong thing; the message names the flag,
// the path and, where Python raised, its traceback.
class HookError : public Error {
 public:
  using Error::Error;
};

class PythonHook {
 public:
  // Starts the interpreter if needed. `parameters` are the arguments ooze calls the function
  // with, by name, for the arity check and its message. Throws HookError.
  static PythonHook load(const std::string& path, const std::string& flag,
                         const std::vector<std::string>& parameters);

  // `async def`: its calls are awaited together on the hooks' event loop.
  bool is_async() const { return is_async_; }
  const std::string& path() const { return path_; }
  const std::string& flag() const { return flag_; }

  // ooze._hook_runtime.`operation`(hook, input as JSON text), parsed back. Throws HookError.
  nlohmann::json call(const char* operation, const nlohmann::json& input) const;

 private:
  PythonHook() = default;

  std::string path_;
  std::string flag_;
  bool is_async_ = false;
  void* hook_ = nullptr;  // the runtime's Hook object (PyObject*), never released
};

}  // namespace ooze::python
