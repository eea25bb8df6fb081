#include "python/python_hook.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include "python/hook_error.h"
#include "python/interpreter.h"
#include "python/python_values.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

py::module_ runtime() { return py::module_::import("ooze._hook_runtime"); }

// A record is a dict; its keys are made once per process and shared by every record.
class DictWriter final : public RecordWriter {
 public:
  void start() { dict_ = py::dict(); }
  py::dict take() { return std::move(dict_); }

  void add(const char* key, int64_t value) override { set(key, py::int_(value)); }
  void add(const char* key, const std::string& value) override { set(key, to_python(value)); }
  void add(const char* key, const std::vector<int64_t>& values) override { set_list(key, values); }
  void add(const char* key, const std::vector<int32_t>& values) override { set_list(key, values); }
  void add(const char* key, const std::vector<float>& values) override {
    py::list list(values.size());
    for (size_t i = 0; i < values.size(); ++i) list[i] = py::float_(values[i]);
    set(key, list);
  }
  void add(const char* key, const nlohmann::json& value) override { set(key, to_python(value)); }

 private:
  template <typename Int>
  void set_list(const char* key, const std::vector<Int>& values) {
    py::list list(values.size());
    for (size_t i = 0; i < values.size(); ++i) list[i] = py::int_(static_cast<int64_t>(values[i]));
    set(key, list);
  }
  void set(const char* key, py::handle value) {
    PyObject* name = PyUnicode_InternFromString(key);  // interned: the same object every time
    PyDict_SetItem(dict_.ptr(), name, value.ptr());
    Py_DECREF(name);
  }

  py::dict dict_;
};

}  // namespace

HookError hook_error(py::error_already_set& error, const std::string& hook) {
  if (error.matches(runtime().attr("HookError"))) {
    return HookError(py::str(error.value()).cast<std::string>());
  }
  return HookError(hook + ": " + error.what());
}

PythonHook PythonHook::load(const std::string& path, const std::string& flag,
                            const std::vector<std::string>& parameters, Passing passing) {
  return load_checked(path, flag, {parameters}, passing);
}

PythonHook PythonHook::load_any(const std::string& path, const std::string& flag,
                                const std::vector<std::vector<std::string>>& signatures) {
  return load_checked(path, flag, signatures, Passing::kByPosition);
}

PythonHook PythonHook::load_checked(const std::string& path, const std::string& flag,
                                    const std::vector<std::vector<std::string>>& signatures,
                                    Passing passing) {
  ensure_started();
  py::gil_scoped_acquire gil;
  PythonHook hook;
  hook.path_ = path;
  hook.flag_ = flag;
  try {
    py::list accepted;
    for (const std::vector<std::string>& parameters : signatures) {
      accepted.append(to_python(parameters));
    }
    py::object loaded =
        runtime().attr("load_hook")(path, flag, accepted, passing == Passing::kByKeyword);
    hook.is_async_ = loaded.attr("is_async").cast<bool>();
    hook.parameters_ = loaded.attr("parameters").cast<std::vector<std::string>>();
    hook.hook_ = loaded.release().ptr();
  } catch (py::error_already_set& error) {
    throw hook_error(error, flag + " " + path);
  }
  return hook;
}

nlohmann::json PythonHook::call(const char* operation, const nlohmann::json& input) const {
  py::gil_scoped_acquire gil;
  try {
    py::handle hook(static_cast<PyObject*>(hook_));
    return from_python(runtime().attr(operation)(hook, to_python(input)));
  } catch (py::error_already_set& error) {
    throw hook_error(error, flag_ + " " + path_);
  } catch (const std::invalid_argument& error) {
    throw HookError(flag_ + " " + path_ + ": " + error.what());
  }
}

nlohmann::json PythonHook::call_with_records(const char* operation, size_t count,
                                             const WriteRecord& write) const {
  py::gil_scoped_acquire gil;
  try {
    py::list records(count);
    DictWriter writer;
    for (size_t i = 0; i < count; ++i) {
      writer.start();
      write(i, writer);
      records[i] = writer.take();
    }
    py::handle hook(static_cast<PyObject*>(hook_));
    return from_python(runtime().attr(operation)(hook, records));
  } catch (py::error_already_set& error) {
    throw hook_error(error, flag_ + " " + path_);
  } catch (const std::invalid_argument& error) {
    throw HookError(flag_ + " " + path_ + ": " + error.what());
  }
}

}  // namespace ooze::python
