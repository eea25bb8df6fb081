// The HookError of a Python error raised while a hook ran. Internal to python/ (pybind11); call
// with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "python/python_hook.h"

namespace ooze::python {

// ooze._hook_runtime.HookError already names the hook and says what was wrong: its message as is.
// Any other error is a fault of ooze's own runtime, named after `hook` ("--flag path") with
// Python's traceback.
HookError hook_error(pybind11::error_already_set& error, const std::string& hook);

}  // namespace ooze::python
