#include "python/tensor_bridge.h"

#include <torch/csrc/autograd/python_variable.h>

#include <mutex>

#include "python/interpreter.h"
#include "python/python_hook.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

void import_torch() {
  ensure_started();
  py::gil_scoped_acquire gil;
  py::module_ torch;
  try {
    torch = py::module_::import("torch");
  } catch (py::error_already_set& error) {
    throw HookError(
        std::string("hooks that take tensors need torch in ") + executable() +
        " (Debian: apt-get install python3-torch, the build of libtorch-dev): " + error.what());
  }
  // THPVariableClass is set by the libtorch_python ooze links when *that* library's module
  // initialises: it stays null when the interpreter imported another torch build.
  if (THPVariableClass == nullptr) {
    throw HookError(std::string("the torch that ") + executable() + " imports (" +
                    py::str(torch.attr("__file__")).cast<std::string>() +
                    ") is not the LibTorch ooze was built with: build ooze against that "
                    "PyTorch's LibTorch (-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; "
                    "print(torch.utils.cmake_prefix_path)')) or run hooks with the Python whose "
                    "torch is ooze's (-DPython3_EXECUTABLE)");
  }
}

}  // namespace

void ensure_torch() {
  static std::once_flag once;
  std::call_once(once, import_torch);
}

py::object to_python(const at::Tensor& tensor) {
  if (!tensor.defined()) return py::none();
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(tensor));
}

py::list tensor_list(const std::vector<at::Tensor>& tensors) {
  py::list out(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) out[i] = to_python(tensors[i]);
  return out;
}

bool is_tensor(py::handle object) { return THPVariable_Check(object.ptr()); }

at::Tensor from_python(py::handle object, const std::string& what) {
  if (!is_tensor(object)) {
    throw HookError(what + " is a " +
                    py::str(py::type::of(object).attr("__name__")).cast<std::string>() +
                    ", not a torch.Tensor");
  }
  return THPVariable_Unpack(object.ptr());
}

}  // namespace ooze::python
