#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "comm/comm_error.h"
#include "core/error.h"

namespace ooze {
namespace comm {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kHello = 5, kConnected = 6 };
enum Status : uint8_t { kOk = 0, kMissing = 1, kBadRequest = 2 };

void append_u32(std::string& out, uint32_t v) {
  char bytes[4];
  std::memcpy(bytes, &v, 4);  // little-endian hosts only, like the rest of ooze
  out.append(bytes, 4);
}

std::string encode_frame(uint8_t head, const std::vector<std::string>& fields) {
  std::string payload(1, static_cast<char>(head));
  for (const auto& f : fields) {
    append_u32(payload, static_cast<uint32_t>(f.size()));
    payload += f;
  }
  std::string frame;
  append_u32(frame, static_cast<uint32_t>(payload.size()));
  return frame + payload;
}

// Splits a payload into its head byte and fields; false if the payload is malformed.
bool decode_payload(const std::string& payload, uint8_t* head, std::vector<std::string>* fields) {
  if (payload.empty()) return false;
  *head = static_cast<uint8_t>(payload[0]);
  size_t pos = 1;
  while (pos < payload.size()) {
    if (payload.size() - pos < 4) return false;
    uint32_t len;
    std::memcpy(&len, payload.data() + pos, 4);
    pos += 4;
    if (len > payload.size() - pos) return false;
    fields->emplace_back(payload.substr(pos, len));
    pos += len;
  }
  return true;
}

std::string errno_text() { return std::strerror(errno); }

sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    throw CommError("cannot resolve store host '" + host + "': " + gai_strerror(rc));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(result->ai_addr);
  ::freeaddrinfo(result);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

int64_t decode_i64(const std::string& s) {
  int64_t v = 0;
  if (s.size() == 8) std::memcpy(&v, s.data(), 8);
  return v;
}

std::string encode_i64(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Server

struct TcpStoreServer::Connection {
  int fd = -1;
  int rank = -1;
  std::string in;
  std::string out;
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  sockaddr_in addr = resolve(host, port);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw CommError("store server: socket() failed: " + errno_text());
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::string why = errno_text();
    ::close(listen_fd_);
    throw CommError("store server cannot listen on " + host + ":" + std::to_string(port) + ": " +
                    why + " (is another run using that port? pick another with --master-port)");
  }
  ::listen(listen_fd_, 128);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw CommError("store server: pipe() failed: " + errno_text());
  }
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  char byte = 0;
  if (::write(wake_pipe_[1], &byte, 1) < 0) {
    // The serve loop also polls with a timeout, so it stops regardless.
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void TcpStoreServer::serve() {
  std::vector<std::unique_ptr<Connection>> conns;
  while (!stopping_) {
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    for (auto& c : conns) {
      fds.push_back({c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    }
    if (::poll(fds.data(), fds.size(), 200) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        auto conn = std::make_unique<Connection>();
        conn->fd = fd;
        conns.push_back(std::move(conn));
      }
    }
    std::vector<Connection*> closing;
    for (size_t i = 2; i < fds.size(); ++i) {
      Connection& conn = *conns[i - 2];
      bool alive = true;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[65536];
        ssize_t n = ::recv(conn.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          conn.in.append(buf, static_cast<size_t>(n));
          alive = handle_frames(conn);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          alive = false;
        }
      }
      if (alive && !conn.out.empty()) {
        ssize_t n = ::send(conn.fd, conn.out.data(), conn.out.size(), MSG_NOSIGNAL);
        if (n > 0) {
          conn.out.erase(0, static_cast<size_t>(n));
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          alive = false;
        }
      }
      if (!alive) closing.push_back(&conn);
    }
    for (Connection* conn : closing) {
      ::close(conn->fd);
      conns.erase(
          std::remove_if(conns.begin(), conns.end(),
                         [conn](const std::unique_ptr<Connection>& c) { return c.get() == conn; }),
          conns.end());
    }
    connected_.clear();
    for (auto& c : conns) {
      if (c->rank >= 0) connected_.push_back(c->rank);
    }
  }
  for (auto& c : conns) ::close(c->fd);
}

bool TcpStoreServer::handle_frames(Connection& conn) {
  while (conn.in.size() >= 4) {
    uint32_t len;
    std::memcpy(&len, conn.in.data(), 4);
    if (len == 0 || len > kMaxStoreFrameBytes) return false;  // garbage: drop the client
    if (conn.in.size() - 4 < len) break;
    std::string payload = conn.in.substr(4, len);
    conn.in.erase(0, 4 + static_cast<size_t>(len));
    conn.out += handle_request(conn, payload);
  }
  return conn.in.size() <= kMaxStoreFrameBytes + 4;
}

std::string TcpStoreServer::handle_request(Connection& conn, const std::string& payload) {
  uint8_t op = 0;
  std::vector<std::string> f;
  if (!decode_payload(payload, &op, &f)) return encode_frame(kBadRequest, {"malformed frame"});
  switch (op) {
    case kSet:
      if (f.size() != 2) break;
      data_[f[0]] = f[1];
      return encode_frame(kOk, {});
    case kGet: {
      if (f.size() != 1) break;
      auto it = data_.find(f[0]);
      if (it == data_.end()) return encode_frame(kMissing, {});
      return encode_frame(kOk, {it->second});
    }
    case kAdd: {
      if (f.size() != 2 || f[1].size() != 8) break;
      auto it = data_.find(f[0]);
      int64_t value = (it == data_.end() ? 0 : decode_i64(it->second)) + decode_i64(f[1]);
      data_[f[0]] = encode_i64(value);
      return encode_frame(kOk, {encode_i64(value)});
    }
    case kCheck: {
      for (const auto& key : f) {
        if (data_.count(key) == 0) return encode_frame(kMissing, {});
      }
      return encode_frame(kOk, {});
    }
    case kHello:
      if (f.size() != 1 || f[0].size() != 8) break;
      conn.rank = static_cast<int>(decode_i64(f[0]));
      return encode_frame(kOk, {});
    case kConnected: {
      std::vector<std::string> ranks;
      for (int r : connected_) ranks.push_back(encode_i64(r));
      if (conn.rank >= 0 &&
          std::find(connected_.begin(), connected_.end(), conn.rank) == connected_.end()) {
        ranks.push_back(encode_i64(conn.rank));
      }
      return encode_frame(kOk, ranks);
    }
    default:
      break;
  }
  return encode_frame(kBadRequest, {"unknown or malformed request"});
}

// ---------------------------------------------------------------------------------------------
// Client

TcpStore::TcpStore(const std::string& host, int port, int rank, bool host_server,
                   std::chrono::milliseconds connect_timeout)
    : host_(host), port_(port) {
  if (host_server) {
    server_ = std::make_unique<TcpStoreServer>(host, port);
    port_ = server_->port();
  }
  sockaddr_in addr = resolve(host_, port_);
  auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw CommError("store client: socket() failed: " + errno_text());
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    std::string why = errno_text();
    ::close(fd_);
    fd_ = -1;
    if (std::chrono::steady_clock::now() + backoff > deadline) {
      throw CommTimeoutError("rank " + std::to_string(rank) + " could not reach the rendezvous " +
                             "store at " + address() + " within " +
                             std::to_string(connect_timeout.count()) + " ms (" + why +
                             "): rank 0, which hosts it, never started or has died");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  request(kHello, {encode_i64(rank)});
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::vector<std::string> TcpStore::request(uint8_t op, const std::vector<std::string>& fields) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string lost = "lost the connection to the rendezvous store at " + address() +
                           " (rank 0, which hosts it, may have died)";
  std::string frame = encode_frame(op, fields);
  if (frame.size() - 4 > kMaxStoreFrameBytes) {
    throw CommError("store request of " + std::to_string(frame.size()) + " bytes exceeds the " +
                    std::to_string(kMaxStoreFrameBytes) + "-byte frame limit");
  }
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      throw CommError(lost + ": " + errno_text());
    }
    sent += static_cast<size_t>(n);
  }
  auto read_exact = [&](char* dst, size_t count) {
    size_t got = 0;
    while (got < count) {
      ssize_t n = ::recv(fd_, dst + got, count - got, 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        throw CommError(lost);
      }
      got += static_cast<size_t>(n);
    }
  };
  uint32_t len = 0;
  read_exact(reinterpret_cast<char*>(&len), 4);
  if (len == 0 || len > kMaxStoreFrameBytes)
    throw CommError("malformed reply from store " + address());
  std::string payload(len, '\0');
  read_exact(&payload[0], len);
  uint8_t status = 0;
  std::vector<std::string> reply;
  if (!decode_payload(payload, &status, &reply)) {
    throw CommError("malformed reply from store " + address());
  }
  if (status == kBadRequest) {
    throw CommError("store " + address() + " rejected a request: " +
                    (reply.empty() ? std::string("bad request") : reply[0]));
  }
  if (status == kMissing) return {};
  reply.insert(reply.begin(), std::string("ok"));  // marks presence even with no fields
  return reply;
}

void TcpStore::set(const std::string& key, const std::string& value) {
  request(kSet, {key, value});
}

std::string TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  auto reply = request(kGet, {key});
  if (reply.size() != 2) throw CommError("store " + address() + " lost key '" + key + "'");
  return reply[1];
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  auto reply = request(kAdd, {key, encode_i64(delta)});
  if (reply.size() != 2) throw CommError("malformed add reply from store " + address());
  return decode_i64(reply[1]);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return !request(kCheck, keys).empty();
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(1);
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (const auto& key : keys) {
        if (!check({key})) missing += (missing.empty() ? "'" : ", '") + key + "'";
      }
      throw CommTimeoutError("timed out after " + std::to_string(timeout.count()) +
                             " ms waiting for store keys " + missing + " at " + address());
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(20));
  }
}

std::vector<int> TcpStore::connected_ranks() {
  auto reply = request(kConnected, {});
  std::set<int> ranks;
  for (size_t i = 1; i < reply.size(); ++i) ranks.insert(static_cast<int>(decode_i64(reply[i])));
  return std::vector<int>(ranks.begin(), ranks.end());
}

std::pair<std::string, int> parse_host_port(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    throw ConfigError("address '" + address + "' is not of the form HOST:PORT");
  }
  std::string port_text = address.substr(colon + 1);
  int port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9' || port > 65535) {
      throw ConfigError("address '" + address + "' has an invalid port '" + port_text + "'");
    }
    port = port * 10 + (c - '0');
  }
  if (port <= 0 || port > 65535) {
    throw ConfigError("address '" + address + "': port must be in 1..65535");
  }
  return {address.substr(0, colon), port};
}

}  // namespace comm
}  // namespace ooze
