// at::Tensor <-> torch.Tensor without a copy, for the python/*.cpp that hand tensors to hooks: the
// Python object wraps the very tensor (same storage, same autograd graph), so what a hook computes
// from it backpropagates into ooze's own graph, and a tensor a hook returns is ooze's to use.
// This works because the interpreter's torch is the LibTorch ooze links (Debian's python3-torch
// and libtorch-dev are one build); ensure_torch() refuses any other.
//
//   python::ensure_torch();                       // once, before the first wrap
//   pybind11::gil_scoped_acquire gil;
//   pybind11::object mine = python::to_python(tensor);
//   at::Tensor back = python::from_python(result, "the loss");
//
// Only python/*.cpp (built without a precompiled header) include this, for it brings pybind11;
// other folders see plain at::Tensor interfaces (python/loss_hook.h).
#pragma once

#include <ATen/ATen.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace ooze::python {

// Starts the interpreter if needed and imports torch once per process. Takes the GIL itself.
// Throws HookError when the interpreter has no torch, or a torch other than ooze's LibTorch.
void ensure_torch();

// GIL held, torch imported: a torch.Tensor sharing `tensor` (undefined: None).
pybind11::object to_python(const at::Tensor& tensor);
// The same for each tensor: a list as Slime's per-sample batches are.
pybind11::list tensor_list(const std::vector<at::Tensor>& tensors);
// GIL held: whether `object` is a torch.Tensor.
bool is_tensor(pybind11::handle object);
// GIL held: the tensor `object` holds, shared. Throws HookError naming `what` when it is none.
at::Tensor from_python(pybind11::handle object, const std::string& what);

}  // namespace ooze::python
