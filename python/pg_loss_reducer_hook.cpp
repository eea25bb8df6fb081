#include "python/pg_loss_reducer_hook.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include "python/hook_error.h"
#include "python/tensor_bridge.h"

namespace py = pybind11;

namespace ooze::python {

PgLossReducerHook PgLossReducerHook::load(const std::string& path, const std::string& flag) {
  ensure_torch();
  return PgLossReducerHook(PythonHook::load(
      path, flag, {"total_lengths", "response_lengths", "loss_masks", "calculate_per_token_loss"}));
}

at::Tensor PgLossReducerHook::reduce(const std::vector<int64_t>& total_lengths,
                                     const std::vector<int64_t>& response_lengths,
                                     const std::vector<at::Tensor>& loss_masks, bool per_token,
                                     const at::Tensor& x) const {
  at::Tensor out;
  py::gil_scoped_acquire gil;  // every Python object below dies before it goes
  try {
    static const py::handle reduce_pg_loss =
        py::object(py::module_::import("ooze._loss_runtime").attr("reduce_pg_loss")).release();
    py::object result =
        reduce_pg_loss(py::handle(static_cast<PyObject*>(hook_.object())), total_lengths,
                       response_lengths, tensor_list(loss_masks), per_token, to_python(x));
    out = from_python(result, "the reduced pg_loss");
  } catch (py::error_already_set& error) {
    throw hook_error(error, hook_.flag() + " " + hook_.path());
  }
  return out;
}

}  // namespace ooze::python
