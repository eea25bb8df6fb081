// The weight-sync flags (section "weight_sync"), Slime's names where Slime has the setting:
//   --update-weight-buffer-size  bytes per bucket (default 512 MiB)
//   --weight-sync-timeout        seconds any one wait of a sync may take: a peer that does not
//                                answer within it is named in the error (default 300)
//   --check-weight-sync          after each sync, compare every engine's per-tensor checksums
//                                with the trainer's (default off; the tests turn it on)
#pragma once

#include <chrono>
#include <cstdint>

#include "core/option_fields.h"
#include "weight_sync/bucket.h"

namespace ooze::trainer {

struct WeightSyncOptions {
  int64_t update_weight_buffer_size = weight_sync::kDefaultUpdateWeightBufferSize;
  double timeout_seconds = 300;
  bool check = false;

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  }
  // The flags above ("weight_sync" section).
  static const OptionFields<WeightSyncOptions>& fields();

  template <class A>
  void save(A& ar) const {
    save_options(ar, *this);
  }
  template <class A>
  void load(A& ar) {
    load_options(ar, *this);
  }
};

}  // namespace ooze::trainer
