#include "comm/process_group.h"

#include "comm/gloo_communicator.h"
#include "core/error.h"
#ifdef OOZE_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace ooze::comm {

ProcessGroupOptions ProcessGroupOptions::from_config(const Config& config) {
  ProcessGroupOptions options;
  options.timeout_minutes = config.get<double>("distributed_timeout_minutes");
  return options;
}

void add_distributed_fields(ConfigSchema& schema, const ProcessGroupOptions& defaults) {
  schema.section("distributed");
  schema
      .add_double("distributed_timeout_minutes", defaults.timeout_minutes,
                  "Timeout of forming a collective group and of every collective, in minutes.")
      .greater_than(0);
}

std::shared_ptr<Communicator> init_process_group(std::shared_ptr<Store> store, int rank,
                                                 int world_size, const std::string& name,
                                                 at::Device device,
                                                 const ProcessGroupOptions& options) {
  if (device.is_cuda()) {
#ifdef OOZE_HAVE_NCCL
    return make_nccl_communicator(std::move(store), rank, world_size, name, options.timeout(),
                                  device.has_index() ? device.index() : 0);
#else
    throw Error("group '" + name + "' computes on " + device.str() +
                " but this build of ooze has no NCCL: rebuild where the CUDA toolkit and NCCL "
                "are installed");
#endif
  }
  return make_gloo_communicator(std::move(store), rank, world_size, name, options.timeout(),
                                options.host);
}

}  // namespace ooze::comm
