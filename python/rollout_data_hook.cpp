#include "python/rollout_data_hook.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include "python/hook_error.h"
#include "python/tensor_bridge.h"

namespace py = pybind11;

namespace ooze::python {

RolloutDataHook RolloutDataHook::load(const std::string& path, const std::string& flag) {
  ensure_torch();
  return RolloutDataHook(
      PythonHook::load_any(path, flag, {{"args", "rollout_id", "rollout_data"}, {"args"}}));
}

void RolloutDataHook::call(int64_t rollout_id, const RolloutData& data) const {
  py::gil_scoped_acquire gil;  // every Python object below dies before it goes
  try {
    py::dict rollout_data;
    for (const auto& [key, tensors] : data.tensor_lists) {
      rollout_data[key.c_str()] = tensor_list(tensors);
    }
    for (const auto& [key, numbers] : data.number_lists) rollout_data[key.c_str()] = numbers;
    py::module_::import("ooze._hook_runtime")
        .attr("postprocess_rollout_data")(py::handle(static_cast<PyObject*>(hook_.object())),
                                          rollout_id, rollout_data);
  } catch (py::error_already_set& error) {
    throw hook_error(error, hook_.flag() + " " + hook_.path());
  }
}

}  // namespace ooze::python
