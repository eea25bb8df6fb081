#include "actors/node_table.h"

#include "core/logging.h"

namespace ooze::actors {

using Clock = std::chrono::steady_clock;

void NodeTable::register_node(const std::string& routing_id, const RegisterNode& request) {
  NodeRecord record;
  record.capacity = NodeCapacity::make(request.node_id, request.address, request.resources);
  record.routing_id = routing_id;
  record.pid = request.pid;
  record.last_seen = Clock::now();
  nodes_[request.node_id] = std::move(record);
  OOZE_LOG(INFO) << "node " << request.node_id << " joined from " << request.address << " with "
                 << format_resources(request.resources);
}

void NodeTable::register_client(const std::string& routing_id, const RegisterClient& request) {
  ClientRecord& client = clients_[routing_id];
  client.routing_id = routing_id;
  client.is_driver = request.is_driver;
  client.pid = request.pid;
  client.last_seen = Clock::now();
}

void NodeTable::remove_client(const std::string& routing_id) { clients_.erase(routing_id); }

void NodeTable::touch(const std::string& routing_id) {
  auto now = Clock::now();
  for (auto& [id, node] : nodes_) {
    if (node.routing_id == routing_id) node.last_seen = now;
  }
  auto client = clients_.find(routing_id);
  if (client != clients_.end()) client->second.last_seen = now;
}

void NodeTable::expire_nodes(
    Clock::time_point now, std::chrono::milliseconds timeout,
    const std::function<void(const std::string& node_id, const std::string& address)>& on_dead) {
  for (auto& [node_id, node] : nodes_) {
    if (node.capacity.alive && now - node.last_seen > timeout) {
      node.capacity.alive = false;
      OOZE_LOG(WARN) << "node " << node_id << " (" << node.capacity.address
                     << ") stopped heart-beating; its actors are dead";
      on_dead(node_id, node.capacity.address);
    }
  }
}

std::vector<std::string> NodeTable::silent_clients(Clock::time_point now,
                                                   std::chrono::milliseconds timeout) const {
  std::vector<std::string> silent;
  for (const auto& [routing_id, client] : clients_) {
    if (now - client.last_seen > timeout) silent.push_back(routing_id);
  }
  return silent;
}

std::vector<NodeCapacity> NodeTable::alive_capacities() const {
  std::vector<NodeCapacity> capacities;
  for (const auto& [node_id, node] : nodes_) {
    if (node.capacity.alive) capacities.push_back(node.capacity);
  }
  return capacities;
}

void NodeTable::commit(const std::vector<NodeCapacity>& capacities) {
  for (const NodeCapacity& capacity : capacities) nodes_.at(capacity.node_id).capacity = capacity;
}

void NodeTable::release_allocation(const Allocation& allocation) {
  auto node = nodes_.find(allocation.node_id);
  if (node != nodes_.end()) release(node->second.capacity, allocation);
}

const NodeRecord* NodeTable::find(const std::string& node_id) const {
  auto node = nodes_.find(node_id);
  return node == nodes_.end() ? nullptr : &node->second;
}

std::map<std::string, std::string> NodeTable::addresses() const {
  std::map<std::string, std::string> addresses;
  for (const auto& [node_id, node] : nodes_) addresses[node_id] = node.capacity.address;
  return addresses;
}

bool NodeTable::is_driver(const std::string& routing_id) const {
  auto client = clients_.find(routing_id);
  return client != clients_.end() && client->second.is_driver;
}

std::vector<NodeInfo> NodeTable::infos() const {
  std::vector<NodeInfo> infos;
  for (const auto& [node_id, node] : nodes_) {
    infos.push_back({node_id, node.capacity.address, node.capacity.total, node.capacity.available,
                     node.capacity.alive, node.pid});
  }
  return infos;
}

}  // namespace ooze::actors
