#include "launcher/foundation_demo_config.h"

#include <string>

#include "comm/process_group.h"
#include "fsdp/packing.h"

namespace ooze::launcher {
namespace {

void add_run_fields(ConfigSchema& schema) {
  schema.section("run");
  schema.add_int("seed", 1234, "Random seed for initialization and data generation.");
  schema.add_string("output_dir", "runs/default",
                    "Directory for the effective config, metrics and checkpoints.");
  schema.add_enum("log_level", {"debug", "info", "warn", "error"}, "info",
                  "Lowest level of log lines printed to stderr.");
}

void add_demo_fields(ConfigSchema& schema) {
  schema.section("demo");
  schema.add_int("world_size", 2, "Number of training processes (data-parallel ranks).").min(1);
  schema.add_int("num_steps", 50, "Optimizer steps to run.").min(1);
  schema.add_double("lr", 0.05, "Learning rate of the demo's SGD.").greater_than(0);
  schema.add_int("global_batch_size", 64, "Samples per optimizer step, summed over all ranks.")
      .min(1);
  fsdp::add_micro_batch_size_field(schema, 16);
  schema.add_int("save_interval", 0, "Save a checkpoint every N steps; 0 saves only at the end.")
      .min(0);
  schema.add_int("feature_dim", 16, "Input features of the demo's linear-regression model.").min(1);

  schema.add_check("global_batch_size_divisible_by_world_size", [](const Config& c) {
    int64_t batch = c.get<int64_t>("global_batch_size");
    int64_t world = c.get<int64_t>("world_size");
    if (batch % world == 0) return std::string();
    return "global_batch_size = " + std::to_string(batch) +
           " is not divisible by world_size = " + std::to_string(world) +
           ": every rank must get the same number of samples";
  });
  schema.add_check("global_batch_size_divisible_by_micro_batches", [](const Config& c) {
    int64_t batch = c.get<int64_t>("global_batch_size");
    int64_t world = c.get<int64_t>("world_size");
    int64_t micro = c.get<int64_t>("micro_batch_size");
    if (batch % world != 0) return std::string();  // reported by the check above
    if (batch % (world * micro) == 0) return std::string();
    return "global_batch_size = " + std::to_string(batch) +
           " is not divisible by world_size * micro_batch_size = " + std::to_string(world) + " * " +
           std::to_string(micro) + " = " + std::to_string(world * micro) + ": each rank's " +
           std::to_string(batch / world) + " samples must split into whole micro-batches";
  });
}

ConfigSchema build_schema() {
  ConfigSchema schema;
  add_run_fields(schema);
  comm::add_distributed_fields(schema);
  add_demo_fields(schema);
  return schema;
}

}  // namespace

const ConfigSchema& foundation_demo_schema() {
  static const ConfigSchema schema = build_schema();
  return schema;
}

}  // namespace ooze::launcher
