#include "actors/transport.h"

#include <array>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "actors/errors.h"
#include "core/logging.h"

namespace ooze::actors {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

// The ZAP handler: answers ZeroMQ's authentication requests for every CURVE server socket of
// this process, admitting only clients that present the cluster's public key. Started once,
// with the first secured server socket, and runs for the life of the process.
class ZapHandler {
 public:
  static void ensure_started(const std::string& allowed_public_key) {
    static ZapHandler* handler = new ZapHandler(allowed_public_key);
    if (handler->allowed_public_key_ != allowed_public_key) {
      throw RuntimeError("a process can serve only one cluster key");
    }
  }

 private:
  explicit ZapHandler(std::string allowed_public_key)
      : allowed_public_key_(std::move(allowed_public_key)),
        socket_(zmq_context(), zmq::socket_type::rep) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind(kZapEndpoint);
    std::array<uint8_t, 32> key{};
    zmq_z85_decode(key.data(), allowed_public_key_.c_str());
    allowed_binary_.assign(reinterpret_cast<const char*>(key.data()), key.size());
    std::thread([this] { serve(); }).detach();
  }

  void serve() {
    while (true) {
      std::vector<zmq::message_t> request;
      try {
        while (true) {
          zmq::message_t part;
          if (!socket_.recv(part)) continue;
          bool more = part.more();
          request.push_back(std::move(part));
          if (!more) break;
        }
      } catch (const zmq::error_t&) {
        return;  // context terminated
      }
      // version, request id, domain, address, identity, mechanism, credentials...
      bool admit = request.size() >= 7 && request[5].to_string() == "CURVE" &&
                   request[6].to_string() == allowed_binary_;
      std::string request_id = request.size() > 1 ? request[1].to_string() : "";
      if (!admit) {
        OOZE_LOG(WARN) << "refused a connection from "
                       << (request.size() > 3 ? request[3].to_string() : "?")
                       << ": it does not hold the cluster key";
      }
      const std::array<std::string, 6> reply = {
          "1.0", request_id, admit ? "200" : "400", admit ? "OK" : "not the cluster key", "", ""};
      for (size_t i = 0; i < reply.size(); ++i) {
        socket_.send(zmq::buffer(reply[i]),
                     i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
  }

  std::string allowed_public_key_;
  std::string allowed_binary_;
  zmq::socket_t socket_;
};

void apply_common_options(zmq::socket_t& socket, int64_t max_part_bytes) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, max_part_bytes);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
}

}  // namespace

zmq::context_t& zmq_context() {
  static zmq::context_t* context = new zmq::context_t(2);
  return *context;
}

// The token is the CURVE secret key in hex: 64 characters that survive any shell or YAML.
Security Security::from_token(const std::string& token) {
  std::array<uint8_t, 32> secret{};
  bool hex = token.size() == 64;
  for (size_t i = 0; hex && i < 32; ++i) {
    unsigned value = 0;
    hex = std::sscanf(token.c_str() + 2 * i, "%2x", &value) == 1 &&
          std::isxdigit(static_cast<unsigned char>(token[2 * i])) &&
          std::isxdigit(static_cast<unsigned char>(token[2 * i + 1]));
    secret[i] = static_cast<uint8_t>(value);
  }
  if (!hex) {
    throw ConfigError(
        "the cluster token must be the 64 hex characters printed by `ooze start "
        "--head` (got " +
        std::to_string(token.size()) + " characters)");
  }
  std::array<char, 41> secret_z85{}, public_z85{};
  zmq_z85_encode(secret_z85.data(), secret.data(), secret.size());
  if (zmq_curve_public(public_z85.data(), secret_z85.data()) != 0) {
    throw RuntimeError("this ZeroMQ has no CURVE support (libzmq built without libsodium)");
  }
  Security security;
  security.enabled = true;
  security.secret_key = secret_z85.data();
  security.public_key = public_z85.data();
  security.token = token;
  return security;
}

std::string Security::generate_token() {
  std::array<char, 41> public_key{}, secret_key{};
  if (zmq_curve_keypair(public_key.data(), secret_key.data()) != 0) {
    throw RuntimeError("this ZeroMQ has no CURVE support (libzmq built without libsodium)");
  }
  std::array<uint8_t, 32> secret{};
  zmq_z85_decode(secret.data(), secret_key.data());
  std::string token;
  char digits[3];
  for (uint8_t byte : secret) {
    std::snprintf(digits, sizeof(digits), "%02x", byte);
    token += digits;
  }
  return token;
}

zmq::socket_t bind_socket(zmq::socket_type type, const std::string& endpoint,
                          const Security& security, int64_t max_part_bytes, std::string* bound) {
  zmq::socket_t socket(zmq_context(), type);
  apply_common_options(socket, max_part_bytes);
  if (type == zmq::socket_type::router) {
    socket.set(zmq::sockopt::router_mandatory, 1);
    // A restarted peer reconnects under its old identity: the new connection takes over.
    socket.set(zmq::sockopt::router_handover, 1);
  }
  if (security.enabled) {
    ZapHandler::ensure_started(security.public_key);
    socket.set(zmq::sockopt::zap_domain, "ooze");
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, security.secret_key);
  }
  std::string bind_to = endpoint;
  if (bind_to.rfind("tcp://", 0) == 0 && bind_to.size() > 2 &&
      bind_to.compare(bind_to.size() - 2, 2, ":0") == 0) {
    bind_to = bind_to.substr(0, bind_to.size() - 1) + "*";
  }
  try {
    socket.bind(bind_to);
  } catch (const zmq::error_t& error) {
    throw RuntimeError("cannot listen on " + endpoint + ": " + error.what());
  }
  if (bound != nullptr) *bound = socket.get(zmq::sockopt::last_endpoint);
  return socket;
}

zmq::socket_t connect_socket(zmq::socket_type type, const std::string& endpoint,
                             const Security& security, int64_t max_part_bytes,
                             const std::string& routing_id) {
  zmq::socket_t socket(zmq_context(), type);
  apply_common_options(socket, max_part_bytes);
  if (!routing_id.empty()) socket.set(zmq::sockopt::routing_id, routing_id);
  if (security.enabled) {
    socket.set(zmq::sockopt::curve_serverkey, security.public_key);
    socket.set(zmq::sockopt::curve_publickey, security.public_key);
    socket.set(zmq::sockopt::curve_secretkey, security.secret_key);
  }
  try {
    socket.connect(endpoint);
  } catch (const zmq::error_t& error) {
    throw RuntimeError("cannot connect to " + endpoint + ": " + error.what());
  }
  return socket;
}

std::string random_id(std::size_t bytes) {
  static thread_local std::mt19937_64 generator(
      std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (std::size_t i = 0; i < bytes; ++i) {
    auto byte = static_cast<uint8_t>(generator());
    id += hex[byte >> 4];
    id += hex[byte & 15];
  }
  return id;
}

std::string endpoint_host(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return "localhost";
  std::string rest = endpoint.substr(6);
  auto colon = rest.rfind(':');
  return colon == std::string::npos ? rest : rest.substr(0, colon);
}

}  // namespace ooze::actors
