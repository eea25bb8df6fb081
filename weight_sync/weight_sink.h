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
};

}  // namespace ooze::weight_sync
