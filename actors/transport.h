// ZeroMQ sockets as the runtime uses them, and the cluster's authentication.
//
// Where endpoints live. Without a cluster address everything is on this machine: endpoints
// are ipc:// sockets inside the session directory (mode 0700), which nothing off the machine
// can reach. With a cluster address they are tcp:// and every socket uses CURVE with the
// cluster key: traffic is encrypted, and a ZAP handler admits only peers that hold the key, so
// a client without the cluster token can neither register a node nor call an actor.
//
// The cluster token is a CURVE secret key (64 hex characters). Every member derives the same
// key pair from it; servers accept exactly that public key.
#pragma once

#include <cstddef>
#include <string>
#include <zmq.hpp>

namespace ooze::actors {

// The process-wide ZeroMQ context. Never destroyed: sockets owned by threads that are still
// running at exit must not block the process from ending.
zmq::context_t& zmq_context();

struct Security {
  bool enabled = false;
  std::string secret_key;  // Z85
  std::string public_key;  // Z85
  std::string token;       // what from_token was given (passed on to workers)

  static Security none() { return {}; }
  // Throws ooze::ConfigError when `token` is not 64 hex characters.
  static Security from_token(const std::string& token);
  // A fresh random cluster token.
  static std::string generate_token();
};

// Largest part a socket accepts: control traffic is small, calls may carry big tensors.
constexpr int64_t kMaxControlPartBytes = 64ll << 20;
constexpr int64_t kMaxDataPartBytes = 4ll << 30;

// A socket bound at `endpoint` ("tcp://HOST:0" picks a free port, "ipc://PATH"); returns it and
// sets `bound` to the endpoint others connect to. Throws RuntimeError naming the endpoint.
zmq::socket_t bind_socket(zmq::socket_type type, const std::string& endpoint,
                          const Security& security, int64_t max_part_bytes, std::string* bound);
// A socket connected to `endpoint`, with `routing_id` as its identity (empty: ZeroMQ's).
zmq::socket_t connect_socket(zmq::socket_type type, const std::string& endpoint,
                             const Security& security, int64_t max_part_bytes,
                             const std::string& routing_id = "");

// A random hex identifier of `bytes` random bytes.
std::string random_id(std::size_t bytes = 8);

// "tcp://HOST:PORT" -> HOST; "ipc://..." -> "127.0.0.1"-less "localhost".
std::string endpoint_host(const std::string& endpoint);

}  // namespace ooze::actors
