// The head: the cluster's tables and the one place that decides. Nodes register with it and
// heart-beat; drivers and workers (clients) register and heart-beat; it places actors and
// placement-group bundles on nodes (placement.h), tells node agents to start and kill workers,
// hears from them when workers start and exit, decides restarts, and broadcasts every actor's
// state changes to the clients, which fail or re-route their calls accordingly. It also keeps
// a small key-value store for rendezvous (collective groups, NCCL unique ids).
//
// The tables live apart, as Ray's GCS managers do: nodes and clients (node_table.h), actors
// (actor_table.h), placement groups (placement_group_table.h), the key-value store
// (kv_table.h). The loop hands each request to its table and carries out what spans them.
//
// One thread runs the loop; all state is owned by that thread. Embedded in the driver for a
// single machine (runtime.h), or the body of `ooze start --head`.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "actors/transport.h"

namespace ooze::actors {

struct HeadOptions {
  std::string endpoint;  // "ipc://PATH" or "tcp://HOST:PORT" (PORT 0: any free port)
  Security security;
  // A node or client not heard from for this long is dead: its actors die (node) or are
  // killed (a client's, when it owns them).
  std::chrono::milliseconds node_timeout{10000};
  std::chrono::milliseconds client_timeout{5000};
};

class Head {
 public:
  // Binds the endpoint (throws RuntimeError when it cannot) and starts the loop thread.
  explicit Head(HeadOptions options);
  ~Head();  // stops the loop; actors are not killed here (nodes do that when they stop)
  Head(const Head&) = delete;
  Head& operator=(const Head&) = delete;

  // The endpoint clients and nodes connect to (the port resolved).
  const std::string& endpoint() const { return endpoint_; }
  // Blocks until stop() is called (from a signal handler thread, for example).
  void wait();
  void stop();

 private:
  class Loop;
  std::string endpoint_;
  std::unique_ptr<Loop> loop_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ooze::actors
