// The CPU backend: collectives over Gloo's TCP transport, and, when every rank of a group runs
// on one host, large broadcasts, all-gathers, reduce-scatters and all-reduces through the
// peers' memory instead (same_host_collectives.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store.h"

namespace ooze {
namespace comm {

// kOff keeps every operation on TCP (to measure or test that path on one host).
enum class SameHostPath { kWhenPossible, kOff };

// Forms group `name` of `size` processes through `store` and connects every pair over TCP on
// `host` (loopback unless the run is configured for a cluster network). Blocks until all
// ranks arrived; after `timeout`, throws CommTimeoutError naming the ranks that did not.
std::shared_ptr<Communicator> make_gloo_communicator(
    std::shared_ptr<Store> store, int rank, int size, const std::string& name,
    std::chrono::milliseconds timeout, const std::string& host = "127.0.0.1",
    SameHostPath same_host_path = SameHostPath::kWhenPossible);

}  // namespace comm
}  // namespace ooze
