// The wire format: one ZeroMQ multipart message per request, reply or event.
//
//   [routing id]   only on ROUTER sockets (added and stripped by ZeroMQ's envelope)
//   header         WireHeader, cereal (wire_archive.h): magic, version, kind, id, method
//   body           the payload, cereal-serialized by the sender (call arguments, results,
//                  control-plane structs of protocol.h)
//   blob 0..n-1    out-of-band bytes (large tensors), sent and received without copies
//
// Every received message is validated before anyone looks at it: part count, header size and
// fields, blob count; a malformed one is dropped by the receiving loop (with a log line), never
// allowed to crash the process. Sockets are made with a maximum inbound part size, so ZeroMQ
// itself cuts off a peer that sends an oversized part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "actors/wire_archive.h"

namespace ooze::actors {

constexpr uint32_t kWireMagic = 0x455a4f4f;  // "OOZE"
constexpr uint16_t kWireVersion = 1;
constexpr std::size_t kMaxHeaderBytes = 1024;
constexpr std::size_t kMaxMethodName = 256;
constexpr uint32_t kMaxBlobs = 4096;

enum class MessageKind : uint8_t { kRequest = 1, kReply = 2, kEvent = 3 };

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  MessageKind kind = MessageKind::kRequest;
  uint64_t id = 0;     // request id; a reply carries its request's id
  std::string method;  // request: what to run; event: the topic; reply: empty
  bool ok = true;      // reply: false when the body is an ErrorReply (protocol.h)
  uint32_t blobs = 0;  // number of blob parts that follow the body

  template <class Archive>
  void serialize(Archive& ar) {
    ar(magic, version, kind, id, method, ok, blobs);
  }
};

struct Message {
  WireHeader header;
  std::string body;
  std::vector<zmq::message_t> blobs;
};

// Sends `message` (with `routing_id` first when sending on a ROUTER socket). Returns false when
// the socket would block or the peer is unroutable (ROUTER_MANDATORY), true when queued.
bool send_message(zmq::socket_t& socket, const Message& message,
                  const std::string* routing_id = nullptr);
// Like send_message, consuming the blobs (moved into ZeroMQ without a copy).
bool send_message(zmq::socket_t& socket, Message&& message,
                  const std::string* routing_id = nullptr);

// Receives every part of the next message (non-blocking: call when the socket is readable).
// Returns nullopt when no message was waiting. A malformed message is consumed and reported
// through `rejected` (the reason), returning nullopt.
std::optional<Message> receive_message(zmq::socket_t& socket, std::string* routing_id,
                                       std::string* rejected);

// Decodes a received header part; throws WireFormatError saying what is wrong.
WireHeader decode_header(const zmq::message_t& part);

}  // namespace ooze::actors
