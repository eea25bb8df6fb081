// The head's table of who is there: nodes (machines running `ooze node`, with what they hold
// as NodeCapacity and whether they are alive) and clients (drivers and workers), registered and
// kept alive by heartbeats. It records presence and resources only; what runs where is decided
// by the actor and placement-group tables, which draw on these capacities (as Ray's
// GcsNodeManager is apart from its actor and placement-group managers).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actors/protocol.h"
#include "actors/resources.h"

namespace ooze::actors {

struct NodeRecord {
  NodeCapacity capacity;
  std::string routing_id;
  int32_t pid = 0;
  std::chrono::steady_clock::time_point last_seen;
};

struct ClientRecord {
  std::string routing_id;
  bool is_driver = false;
  int32_t pid = 0;
  std::chrono::steady_clock::time_point last_seen;
};

class NodeTable {
 public:
  // A node (re)joining replaces what was known of it: all its resources are free again.
  void register_node(const std::string& routing_id, const RegisterNode& request);
  void register_client(const std::string& routing_id, const RegisterClient& request);
  void remove_client(const std::string& routing_id);
  // A heartbeat from `routing_id`, a node or a client.
  void touch(const std::string& routing_id);

  // Marks every alive node silent for longer than `timeout` dead, calling `on_dead` with its id
  // and address right after each (before looking at the next node).
  void expire_nodes(
      std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout,
      const std::function<void(const std::string& node_id, const std::string& address)>& on_dead);
  // Clients silent for longer than `timeout`; they stay in the table until removed.
  std::vector<std::string> silent_clients(std::chrono::steady_clock::time_point now,
                                          std::chrono::milliseconds timeout) const;

  // Copies of the alive nodes' capacities, for placement.h to decide on.
  std::vector<NodeCapacity> alive_capacities() const;
  // A placement decision mutated copies of the alive nodes: make it real.
  void commit(const std::vector<NodeCapacity>& capacities);
  // Gives an allocation back to its node, when the node is still known (alive or not).
  void release_allocation(const Allocation& allocation);

  // The node, or nullptr; at() throws std::out_of_range for an unknown node.
  const NodeRecord* find(const std::string& node_id) const;
  const NodeRecord& at(const std::string& node_id) const { return nodes_.at(node_id); }
  // node id -> address, for every node known.
  std::map<std::string, std::string> addresses() const;

  // By routing id (= client id).
  const std::map<std::string, ClientRecord>& clients() const { return clients_; }
  bool is_driver(const std::string& routing_id) const;

  std::vector<NodeInfo> infos() const;

 private:
  std::map<std::string, NodeRecord> nodes_;
  std::map<std::string, ClientRecord> clients_;
};

}  // namespace ooze::actors
