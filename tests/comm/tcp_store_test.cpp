// The rendezvous store over real sockets: semantics, timeouts, liveness and bad frames.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "comm/comm_error.h"
#include "core/error.h"

namespace ooze {
namespace comm {
namespace tcp_store_test {

using std::chrono::milliseconds;

TEST(TcpStore, SetGetAddCheckAcrossClients) {
  TcpStore host("127.0.0.1", 0, 0, /*host_server=*/true, milliseconds(5000));
  TcpStore other("127.0.0.1", host.port(), 1, false, milliseconds(5000));
  host.set("a", std::string("x\0y", 3));
  EXPECT_EQ(other.get("a", milliseconds(1000)), std::string("x\0y", 3));
  EXPECT_TRUE(other.check({"a"}));
  EXPECT_FALSE(other.check({"a", "b"}));
  EXPECT_EQ(host.add("n", 5), 5);
  EXPECT_EQ(other.add("n", -2), 3);
  other.set("a", "overwritten");
  EXPECT_EQ(host.get("a", milliseconds(1000)), "overwritten");
  std::string big(3 << 20, 'z');
  other.set("big", big);
  EXPECT_EQ(host.get("big", milliseconds(1000)), big);
}

TEST(TcpStore, GetWaitsForALaterSet) {
  TcpStore host("127.0.0.1", 0, 0, true, milliseconds(5000));
  std::thread writer([port = host.port()] {
    TcpStore client("127.0.0.1", port, 1, false, milliseconds(5000));
    std::this_thread::sleep_for(milliseconds(100));
    client.set("late", "value");
  });
  EXPECT_EQ(host.get("late", milliseconds(5000)), "value");
  writer.join();
}

TEST(TcpStore, WaitTimesOutNamingTheMissingKeys) {
  TcpStore host("127.0.0.1", 0, 0, true, milliseconds(5000));
  host.set("present", "1");
  auto start = std::chrono::steady_clock::now();
  try {
    host.wait({"present", "absent"}, milliseconds(200));
    FAIL() << "expected a timeout";
  } catch (const CommTimeoutError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("'absent'"), std::string::npos) << message;
    EXPECT_EQ(message.find("'present'"), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
}

TEST(TcpStore, ConnectedRanksDropAClientThatLeft) {
  TcpStore host("127.0.0.1", 0, 0, true, milliseconds(5000));
  {
    TcpStore one("127.0.0.1", host.port(), 1, false, milliseconds(5000));
    TcpStore two("127.0.0.1", host.port(), 2, false, milliseconds(5000));
    EXPECT_EQ(host.connected_ranks(), (std::vector<int>{0, 1, 2}));
  }
  auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
  while (host.connected_ranks().size() != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(host.connected_ranks(), (std::vector<int>{0}));
}

TEST(TcpStore, UnreachableHostFailsWithinTheConnectTimeout) {
  int port = 0;
  {  // a port nobody listens on
    TcpStoreServer server("127.0.0.1", 0);
    port = server.port();
  }
  auto start = std::chrono::steady_clock::now();
  try {
    TcpStore client("127.0.0.1", port, 3, false, milliseconds(300));
    FAIL() << "expected a timeout";
  } catch (const CommTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3 could not reach"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
}

TEST(TcpStore, GarbageFramesDropOnlyTheSenderAndTheServerKeepsServing) {
  TcpStore host("127.0.0.1", 0, 0, true, milliseconds(5000));
  host.set("k", "v");
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(host.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string junk(rng() % 64 + 1, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 3 == 0) {  // a plausible length prefix followed by a truncated or bogus body
      uint32_t len = static_cast<uint32_t>(rng() % 16 + 1);
      junk = std::string(reinterpret_cast<char*>(&len), 4) + junk.substr(0, junk.size() / 2);
    } else if (i % 3 == 1) {  // a length past the frame limit
      uint32_t len = kMaxStoreFrameBytes + 1 + static_cast<uint32_t>(rng() % 1000);
      junk = std::string(reinterpret_cast<char*>(&len), 4) + junk;
    }
    ASSERT_GT(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
    ::close(fd);
  }
  TcpStore client("127.0.0.1", host.port(), 1, false, milliseconds(5000));
  EXPECT_EQ(client.get("k", milliseconds(1000)), "v");
}

TEST(TcpStore, ParseHostPort) {
  EXPECT_EQ(parse_host_port("10.0.0.1:29500"), std::make_pair(std::string("10.0.0.1"), 29500));
  EXPECT_THROW(parse_host_port("nohost"), ConfigError);
  EXPECT_THROW(parse_host_port("host:"), ConfigError);
  EXPECT_THROW(parse_host_port("host:70000"), ConfigError);
  EXPECT_THROW(parse_host_port("host:12a"), ConfigError);
}

}  // namespace tcp_store_test
}  // namespace comm
}  // namespace ooze
