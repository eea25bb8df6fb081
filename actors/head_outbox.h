// The head's one way out: replies to requests and events to nodes and clients, all over its
// ROUTER socket. Every table of the head sends through it at the moment it decides, so peers
// see the same messages in the same order whichever table made them.
#pragma once

#include <cstdint>
#include <string>
#include <zmq.hpp>

#include "actors/wire.h"

namespace ooze::actors {

class HeadOutbox {
 public:
  explicit HeadOutbox(zmq::socket_t& socket) : socket_(socket) {}
  HeadOutbox(const HeadOutbox&) = delete;
  HeadOutbox& operator=(const HeadOutbox&) = delete;

  // The answer to request `id` of peer `routing_id`.
  template <class T>
  void reply(const std::string& routing_id, uint64_t id, const T& value) {
    send(routing_id, MessageKind::kReply, id, "", true, to_wire(value));
  }
  // A failed answer; `type` picks the exception the client throws (CallState::rethrow).
  void reply_error(const std::string& routing_id, uint64_t id, const std::string& type,
                   const std::string& message);
  // Something the peer did not ask for: an event topic (topic::kActor) or a request to a node
  // agent (method::kStartWorker), which answers nothing the head waits for.
  template <class T>
  void event(const std::string& routing_id, const char* topic, const T& value) {
    send(routing_id, MessageKind::kEvent, 0, topic, true, to_wire(value));
  }

 private:
  void send(const std::string& routing_id, MessageKind kind, uint64_t id, const std::string& method,
            bool ok, std::string body);

  zmq::socket_t& socket_;
};

}  // namespace ooze::actors
