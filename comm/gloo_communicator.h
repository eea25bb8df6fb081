// The CPU backend: collectives over Gloo's TCP transport.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store.h"

namespace ooze {
namespace comm {

// Forms group `name` of `size` processes through `store` and connects every pair over TCP on
// `host` (loopback unless the run is configured for a cluster network). Blocks until all
// ranks arrived; after `timeout`, throws CommTimeoutError naming the ranks that did not.
std::shared_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store, int rank,
                                                     int size, const std::string& name,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& host = "127.0.0.1");

}  // namespace comm
}  // namespace ooze
