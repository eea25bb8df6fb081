#include "trainer/weight_sync_options.h"

namespace ooze::trainer {

WeightSyncOptions WeightSyncOptions::from_config(const Config& config) {
  WeightSyncOptions options;
  options.update_weight_buffer_size = config.get<int64_t>("update_weight_buffer_size");
  options.timeout_seconds = config.get<double>("weight_sync_timeout");
  options.check = config.get<bool>("check_weight_sync");
  return options;
}

void add_weight_sync_fields(ConfigSchema& schema) {
  const WeightSyncOptions defaults;
  schema.section("weight_sync");
  schema
      .add_int("update_weight_buffer_size", defaults.update_weight_buffer_size,
               "Bytes per weight-sync bucket: parameters are gathered, packed and sent to the "
               "engines this many bytes at a time (a larger tensor travels alone).")
      .min(1);
  schema
      .add_double("weight_sync_timeout", defaults.timeout_seconds,
                  "Seconds any one wait of a weight sync may take (an engine's answer, a "
                  "broadcast, the next bucket); past it the sync fails naming the engine or rank "
                  "and the bucket, and engines left half-updated refuse to generate.")
      .greater_than(0);
  schema.add_bool("check_weight_sync", defaults.check,
                  "After every weight sync, compare each engine's per-tensor checksums with the "
                  "trainer's and fail naming the first tensor that differs.");
}

}  // namespace ooze::trainer
