#include "python/loss_hook.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include "python/hook_error.h"
#include "python/tensor_bridge.h"

namespace py = pybind11;

namespace ooze::python {

LossHook LossHook::load(const std::string& path, const std::string& flag) {
  ensure_torch();
  return LossHook(PythonHook::load(path, flag, {"args", "batch", "logits", "sum_of_sample_mean"}));
}

LossHookOutput LossHook::call(const LossHookInputs& inputs) const {
  LossHookOutput out;
  // Every Python object made here dies before the GIL goes: the tensors that come back are held
  // by C++ alone, and the caller may run backward, which must not hold the GIL.
  py::gil_scoped_acquire gil;
  try {
    py::dict batch;
    for (const auto& [key, tensors] : inputs.tensor_lists)
      batch[key.c_str()] = tensor_list(tensors);
    for (const auto& [key, values] : inputs.integer_lists) batch[key.c_str()] = py::cast(values);
    // Looked up once: the import machinery costs more than a small micro-batch's loss.
    static const py::handle compute_loss =
        py::object(py::module_::import("ooze._loss_runtime").attr("compute_loss")).release();
    py::tuple result = compute_loss(py::handle(static_cast<PyObject*>(hook_.object())), batch,
                                    tensor_list(inputs.log_probs), tensor_list(inputs.entropy),
                                    to_python(inputs.token_weights), inputs.data_parallel_rank,
                                    inputs.data_parallel_size);
    out.loss = from_python(result[0], "the loss");
    out.metric_names = result[1].cast<std::vector<std::string>>();
    out.metric_values = from_python(result[2], "the metrics");
  } catch (py::error_already_set& error) {
    throw hook_error(error, hook_.flag() + " " + hook_.path());
  }
  return out;
}

}  // namespace ooze::python
