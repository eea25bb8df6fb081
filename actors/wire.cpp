#include "actors/wire.h"

#include <string_view>

namespace ooze::actors {
namespace {

zmq::message_t header_part(const WireHeader& header) {
  std::string bytes = to_wire(header);
  return zmq::message_t(bytes.data(), bytes.size());
}

// A body above this size is handed to ZeroMQ without copying it.
constexpr std::size_t kCopyBodyBelow = 64 * 1024;

zmq::message_t body_part(const std::string& body) {
  return zmq::message_t(body.data(), body.size());
}

zmq::message_t body_part(std::string&& body) {
  if (body.size() < kCopyBodyBelow) return zmq::message_t(body.data(), body.size());
  auto* owned = new std::string(std::move(body));
  return zmq::message_t(
      owned->data(), owned->size(),
      [](void*, void* hint) { delete static_cast<std::string*>(hint); }, owned);
}

bool send_part(zmq::socket_t& socket, zmq::message_t& part, bool more) {
  auto sent = socket.send(part, more ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                     : zmq::send_flags::dontwait);
  return sent.has_value();
}

template <class Body, class Blobs>
bool send_parts(zmq::socket_t& socket, const WireHeader& header, Body&& body, Blobs& blobs,
                const std::string* routing_id, bool copy_blobs) {
  WireHeader sent_header = header;
  sent_header.blobs = static_cast<uint32_t>(blobs.size());
  if (routing_id != nullptr) {
    zmq::message_t id(routing_id->data(), routing_id->size());
    if (!send_part(socket, id, true)) return false;
  }
  zmq::message_t head = header_part(sent_header);
  if (!send_part(socket, head, true)) return false;
  zmq::message_t payload = body_part(std::forward<Body>(body));
  if (!send_part(socket, payload, !blobs.empty())) return false;
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    zmq::message_t part;
    if (copy_blobs) {
      part.copy(blobs[i]);
    } else {
      part.move(blobs[i]);
    }
    if (!send_part(socket, part, i + 1 < blobs.size())) return false;
  }
  return true;
}

}  // namespace

bool send_message(zmq::socket_t& socket, const Message& message, const std::string* routing_id) {
  auto& blobs = const_cast<std::vector<zmq::message_t>&>(message.blobs);  // copied, not moved
  return send_parts(socket, message.header, message.body, blobs, routing_id, true);
}

bool send_message(zmq::socket_t& socket, Message&& message, const std::string* routing_id) {
  return send_parts(socket, message.header, std::move(message.body), message.blobs, routing_id,
                    false);
}

WireHeader decode_header(const zmq::message_t& part) {
  if (part.size() > kMaxHeaderBytes) {
    throw WireFormatError("header part of " + std::to_string(part.size()) +
                          " bytes exceeds the limit of " + std::to_string(kMaxHeaderBytes));
  }
  WireHeader header;
  from_wire(std::string_view(part.data<char>(), part.size()), header);
  if (header.magic != kWireMagic) throw WireFormatError("bad magic: not an ooze message");
  if (header.version != kWireVersion) {
    throw WireFormatError("wire version " + std::to_string(header.version) + ", expected " +
                          std::to_string(kWireVersion));
  }
  if (header.kind != MessageKind::kRequest && header.kind != MessageKind::kReply &&
      header.kind != MessageKind::kEvent) {
    throw WireFormatError("unknown message kind " + std::to_string(int(header.kind)));
  }
  if (header.method.size() > kMaxMethodName) throw WireFormatError("method name too long");
  if (header.blobs > kMaxBlobs) throw WireFormatError("too many blobs");
  return header;
}

std::optional<Message> receive_message(zmq::socket_t& socket, std::string* routing_id,
                                       std::string* rejected) {
  std::vector<zmq::message_t> parts;
  while (true) {
    zmq::message_t part;
    auto received =
        socket.recv(part, parts.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!received) return std::nullopt;  // nothing waiting (only possible for the first part)
    bool more = part.more();
    // A peer cannot make us hold an unbounded number of parts: stop collecting past the limit
    // but keep draining so the next message starts clean.
    if (parts.size() <= kMaxBlobs + 3) parts.push_back(std::move(part));
    if (!more) break;
  }
  std::size_t first = 0;
  if (routing_id != nullptr) {
    routing_id->assign(parts[0].data<char>(), parts[0].size());
    first = 1;
  }
  try {
    if (parts.size() < first + 2) throw WireFormatError("a message needs a header and a body");
    Message message;
    message.header = decode_header(parts[first]);
    if (parts.size() != first + 2 + message.header.blobs) {
      throw WireFormatError("header announces " + std::to_string(message.header.blobs) +
                            " blobs, message has " + std::to_string(parts.size() - first - 2));
    }
    message.body.assign(parts[first + 1].data<char>(), parts[first + 1].size());
    for (std::size_t i = first + 2; i < parts.size(); ++i) {
      message.blobs.push_back(std::move(parts[i]));
    }
    return message;
  } catch (const WireFormatError& error) {
    if (rejected != nullptr) *rejected = error.what();
    return std::nullopt;
  }
}

}  // namespace ooze::actors
