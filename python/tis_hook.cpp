#include "python/tis_hook.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include "python/hook_error.h"
#include "python/tensor_bridge.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

const std::vector<std::string> kTisParameters = {
    "args",       "pg_loss",       "train_log_probs", "rollout_log_probs",
    "loss_masks", "total_lengths", "response_lengths"};

std::vector<at::Tensor> tensors_of(py::handle list, const std::string& what) {
  std::vector<at::Tensor> out;
  for (py::handle item : list) out.push_back(from_python(item, what));
  return out;
}

}  // namespace

TisHook TisHook::load(const std::string& path, const std::string& flag) {
  ensure_torch();
  return TisHook(PythonHook::load(path, flag, kTisParameters, PythonHook::Passing::kByKeyword));
}

TisHookOutput TisHook::call(const TisHookInputs& inputs) const {
  TisHookOutput out;
  py::gil_scoped_acquire gil;  // every Python object below dies before it goes
  try {
    static const py::handle apply_tis =
        py::object(py::module_::import("ooze._loss_runtime").attr("apply_tis")).release();
    py::tuple result =
        apply_tis(py::handle(static_cast<PyObject*>(hook_.object())), to_python(inputs.pg_loss),
                  tensor_list(inputs.train_log_probs), tensor_list(inputs.rollout_log_probs),
                  tensor_list(inputs.loss_masks), inputs.total_lengths, inputs.response_lengths);
    out.pg_loss = from_python(result[0], "the pg_loss");
    out.loss_masks = tensors_of(result[1], "a loss mask");
    out.metric_names = result[2].cast<std::vector<std::string>>();
    out.metric_values = tensors_of(result[3], "a metric");
  } catch (py::error_already_set& error) {
    throw hook_error(error, hook_.flag() + " " + hook_.path());
  }
  return out;
}

}  // namespace ooze::python
