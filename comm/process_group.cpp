#include "comm/process_group.h"

#include "comm/gloo_communicator.h"
#include "core/error.h"
#ifdef OOZE_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace ooze::comm {

const OptionFields<ProcessGroupOptions>& ProcessGroupOptions::fields() {
  using O = ProcessGroupOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("distributed");
    f.add("distributed_timeout_minutes", &O::timeout_minutes,
          "Timeout of forming a collective group and of every collective, in minutes.")
        .greater_than(0);
    f.add_internal("host", &O::host);
    return f;
  }();
  return fields;
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
