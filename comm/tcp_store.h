// The standalone rendezvous store: one process (rank 0 by convention) hosts a TcpStoreServer,
// every rank (the host included) talks to it through a TcpStore client.
//
// Wire protocol (loopback or cluster network): a frame is a little-endian u32 payload length,
// then the payload: a u8 opcode followed by fields, each a u32 length and that many bytes.
// Frames are bounded (kMaxFrameBytes) and malformed ones close the offending connection.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"

namespace ooze {
namespace comm {

constexpr uint32_t kMaxStoreFrameBytes = 64u << 20;

class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks a free one, see port()) and serves on a background thread.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Connection;
  void serve();
  // Handles every complete frame buffered for `conn`; false if the connection must close.
  bool handle_frames(Connection& conn);
  std::string handle_request(Connection& conn, const std::string& payload);

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::map<std::string, std::string> data_;
  std::vector<int> connected_;  // ranks that said hello and are still connected
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Connects to host:port, retrying until `connect_timeout`. When `host_server` is true this
  // process first starts the server (the rank-0 role). `rank` is reported to the server so it
  // can tell which ranks are still connected.
  TcpStore(const std::string& host, int port, int rank, bool host_server,
           std::chrono::milliseconds connect_timeout);
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<int> connected_ranks() override;

  // The port the server is listening on (useful with port 0 when hosting).
  int port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  std::vector<std::string> request(uint8_t op, const std::vector<std::string>& fields);

  std::string host_;
  int port_;
  std::unique_ptr<TcpStoreServer> server_;
  int fd_ = -1;
  std::mutex mutex_;  // one request at a time on the socket
};

// Parses "host:port"; throws ConfigError on anything else.
std::pair<std::string, int> parse_host_port(const std::string& address);

}  // namespace comm
}  // namespace ooze
