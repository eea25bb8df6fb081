#include "actors/head_outbox.h"

#include "actors/protocol.h"

namespace ooze::actors {

void HeadOutbox::reply_error(const std::string& routing_id, uint64_t id, const std::string& type,
                             const std::string& message) {
  send(routing_id, MessageKind::kReply, id, "", false, to_wire(ErrorReply{type, message, ""}));
}

void HeadOutbox::send(const std::string& routing_id, MessageKind kind, uint64_t id,
                      const std::string& method, bool ok, std::string body) {
  Message message;
  message.header.kind = kind;
  message.header.id = id;
  message.header.method = method;
  message.header.ok = ok;
  message.body = std::move(body);
  try {
    send_message(socket_, std::move(message), &routing_id);
  } catch (const zmq::error_t&) {
    // The peer is gone (ROUTER_MANDATORY): its liveness check will catch up with it.
  }
}

}  // namespace ooze::actors
