// The mixed-precision policy of a sharded model, as in PyTorch's FSDP2 MixedPrecisionPolicy:
// parameters are all-gathered and computed in `param_dtype`, gradients are reduce-scattered
// and accumulated in `reduce_dtype`, and the master weights and optimizer state that live in
// the shards are always fp32.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

#include "core/error.h"

namespace ooze::fsdp {

struct MixedPrecisionPolicy {
  c10::ScalarType param_dtype = c10::ScalarType::Float;   // kFloat or kBFloat16
  c10::ScalarType reduce_dtype = c10::ScalarType::Float;  // kFloat only

  // Throws ooze::ConfigError for a policy this trainer does not implement.
  void validate() const {
    if (param_dtype != c10::ScalarType::Float && param_dtype != c10::ScalarType::BFloat16) {
      throw ConfigError(std::string("fsdp mixed precision: param_dtype must be float32 or "
                                    "bfloat16, got ") +
                        c10::toString(param_dtype));
    }
    if (reduce_dtype != c10::ScalarType::Float) {
      throw ConfigError(std::string("fsdp mixed precision: reduce_dtype must be float32 (the "
                                    "gradients are reduced and accumulated in fp32), got ") +
                        c10::toString(reduce_dtype));
    }
  }
};

}  // namespace ooze::fsdp
