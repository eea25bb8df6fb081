// Where a WeightReceiver delivers the weights it receives: the engine (engine/engine.h) in ooze,
// anything that can load named tensors in tests. Keeps weight_sync/ below the engine: the
// receiver moves bytes and never needs to know what holds the model.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace ooze::weight_sync {

class WeightSink {
 public:
  virtual ~WeightSink() = default;
  // The device the received tensors must end up on ("cpu", "cuda:0").
  virtual std::string weight_device() const = 0;
  // Loads one bucket's named tensors (views into the receive buffer: copy before returning).
  virtual void load_weight_bucket(
      const std::vector<std::pair<std::string, at::Tensor>>& named_tensors) = 0;
  // The sync failed mid-way: the sink drops what it loaded since the sync began.
  virtual void abort_weight_sync(const std::string& reason) = 0;

  // Sharing the parameters with a colocated trainer (WeightReceiver::share_parameters):
  // The parameters by name, as they are (the tensors themselves, not copies).
  virtual std::vector<std::pair<std::string, at::Tensor>> parameters() = 0;
  // From now on each named parameter lives in the given tensor (same shape and dtype), its
  // values copied there first.
  virtual void move_parameters(const std::vector<std::pair<std::string, at::Tensor>>& storage) = 0;
  // The version of the weight sync in progress, or -1 when none is.
  virtual int64_t syncing_version() = 0;
  // The trainer wrote these parameters where they live, in the sync in progress: they count as
  // loaded, as a bucket's would.
  virtual void parameters_written(const std::vector<std::string>& names) = 0;
};

}  // namespace ooze::weight_sync
