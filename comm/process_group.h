// A rank's collective group, as torch.distributed.init_process_group makes it: the backend is
// chosen by the device the group's tensors live on (NCCL for CUDA, Gloo for the CPU), the ranks
// find each other through a Store (on a cluster, the actor runtime's key-value store, which
// every node reaches), and every rendezvous and collective is bounded by one timeout,
// --distributed-timeout-minutes as in Slime.
//
//   ProcessGroupOptions::fields().declare(schema);
//   ProcessGroupOptions options = ProcessGroupOptions::fields().read(config);
//   options.host = node_address;   // where this rank accepts Gloo connections
//   auto group = comm::init_process_group(store, rank, world, "trainer", device, options);
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store.h"
#include "core/option_fields.h"

namespace ooze::comm {

struct ProcessGroupOptions {
  double timeout_minutes = 10;     // --distributed-timeout-minutes
  std::string host = "127.0.0.1";  // Gloo: the address this rank's peers connect to

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(timeout_minutes * 60'000));
  }
  // --distributed-timeout-minutes ("distributed" section); the host travels with the options.
  static const OptionFields<ProcessGroupOptions>& fields();

  template <class A>
  void save(A& ar) const {
    save_options(ar, *this);
  }
  template <class A>
  void load(A& ar) {
    load_options(ar, *this);
  }
};

// Joins the group `name` of `world_size` ranks as `rank`. A CUDA `device` gives an NCCL group
// on that device (ooze::Error when this build has no NCCL); any other device a Gloo group.
// Throws CommTimeoutError naming the missing ranks when the group does not form in time.
std::shared_ptr<Communicator> init_process_group(std::shared_ptr<Store> store, int rank,
                                                 int world_size, const std::string& name,
                                                 at::Device device,
                                                 const ProcessGroupOptions& options);

}  // namespace ooze::comm
