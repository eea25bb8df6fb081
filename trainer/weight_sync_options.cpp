#include "trainer/weight_sync_options.h"

namespace ooze::trainer {

const OptionFields<WeightSyncOptions>& WeightSyncOptions::fields() {
  using O = WeightSyncOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("weight_sync");
    f.add("update_weight_buffer_size", &O::update_weight_buffer_size,
          "Bytes per weight-sync bucket: parameters are gathered, packed and sent to the engines "
          "this many bytes at a time (a larger tensor travels alone).")
        .min(1);
    f.add("weight_sync_timeout", &O::timeout_seconds,
          "Seconds any one wait of a weight sync may take (an engine's answer, a broadcast, the "
          "next bucket); past it the sync fails naming the engine or rank and the bucket, and "
          "engines left half-updated refuse to generate.")
        .greater_than(0);
    f.add("check_weight_sync", &O::check,
          "After every weight sync, compare each engine's per-tensor checksums with the "
          "trainer's and fail naming the first tensor that differs.");
    return f;
  }();
  return fields;
}

}  // namespace ooze::trainer
