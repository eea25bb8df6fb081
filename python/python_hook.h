// A user's Python function named by a hook flag (--custom-rm-path my_rewards.reward_func),
// loaded once and kept for the life of the process, as a plugin library is.
//
//   PythonHook reward = PythonHook::load(path, "--custom-rm-path", {"args", "sample"});
//   nlohmann::json outcomes = reward.call("reward_each", samples_json);
//
// Loading checks everything that can be checked before a run starts: the file or module, the
// attribute, that it is callable, and that it accepts the arguments ooze passes. call() runs
// one of ooze's hook operations (python/ooze/_hook_runtime.py) on the hook, JSON values in and
// out, converted to and from plain Python objects directly (no JSON text); call_with_records()
// writes records (samples) field by field straight into Python dicts, the fast way in for hooks
// called on every sample. The hook gets plain Python objects and ooze gets back only what the
// operation checked. Thread-safe: each call takes the GIL.
#pragma once

#include <cstdint>
#include <functional>
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

// Writes one record's fields into the Python dict a hook operation receives.
class RecordWriter {
 public:
  virtual ~RecordWriter() = default;
  virtual void add(const char* key, int64_t value) = 0;
  virtual void add(const char* key, const std::string& value) = 0;
  virtual void add(const char* key, const std::vector<int64_t>& values) = 0;
  virtual void add(const char* key, const std::vector<int32_t>& values) = 0;
  virtual void add(const char* key, const std::vector<float>& values) = 0;
  virtual void add(const char* key, const nlohmann::json& value) = 0;
};

class PythonHook {
 public:
  // How ooze passes the arguments: by position, or by keyword as Slime calls some hooks
  // (tis_func(**kwargs)).
  enum class Passing { kByPosition, kByKeyword };

  // Starts the interpreter if needed. `parameters` are the arguments ooze calls the function
  // with, by name, for the arity check and its message. Throws HookError.
  static PythonHook load(const std::string& path, const std::string& flag,
                         const std::vector<std::string>& parameters,
                         Passing passing = Passing::kByPosition);
  // The same for a hook ooze calls in one of several ways (Slime's signature and a fuller one):
  // the first of `signatures` the function accepts, by position, is what parameters() says.
  static PythonHook load_any(const std::string& path, const std::string& flag,
                             const std::vector<std::vector<std::string>>& signatures);

  // `async def`: its calls are awaited together on the hooks' event loop.
  bool is_async() const { return is_async_; }
  const std::string& path() const { return path_; }
  const std::string& flag() const { return flag_; }
  // The arguments ooze calls it with (the signature it accepted).
  const std::vector<std::string>& parameters() const { return parameters_; }
  // The runtime's Hook object (a PyObject*, with its `function` and `name`), for the python/*.cpp
  // that call a hook with more than JSON (python/loss_hook.cpp).
  void* object() const { return hook_; }

  // ooze._hook_runtime.`operation`(hook, input), its answer back as JSON. Throws HookError.
  nlohmann::json call(const char* operation, const nlohmann::json& input) const;
  // ooze._hook_runtime.`operation`(hook, records): `count` dicts, record i written by
  // write(i, writer). Throws HookError.
  using WriteRecord = std::function<void(size_t index, RecordWriter& record)>;
  nlohmann::json call_with_records(const char* operation, size_t count,
                                   const WriteRecord& write) const;

 private:
  PythonHook() = default;
  static PythonHook load_checked(const std::string& path, const std::string& flag,
                                 const std::vector<std::vector<std::string>>& signatures,
                                 Passing passing);

  std::string path_;
  std::string flag_;
  std::vector<std::string> parameters_;
  bool is_async_ = false;
  void* hook_ = nullptr;  // the runtime's Hook object (PyObject*), never released
};

}  // namespace ooze::python
