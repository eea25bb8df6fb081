// Forming a cluster as docs/train.md says: `ooze start --head --port P`, then the join command it
// prints pasted verbatim on the other machine. Each "machine" here has its own cluster directory
// (where `ooze start` keeps its token and pid files); the joining one has no token but the
// command's. With no --host the head must name an address other machines reach (this machine's
// own, not loopback); with --host 127.0.0.2 it names that one and says only this machine can join.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace cluster_join_test {

using ::ooze::testing::ExitStatus;
using ::ooze::testing::ooze_binary;
using ::ooze::testing::Process;
using namespace std::chrono_literals;

// This machine's IPv4 addresses other than loopback, as getifaddrs lists them.
std::set<std::string> non_loopback_addresses() {
  std::set<std::string> found;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return found;
  for (const ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    if ((entry->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if (inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text)) != nullptr) found.insert(text);
  }
  freeifaddrs(interfaces);
  return found;
}

// `ooze stop` on every "machine" when the test ends, passed or not.
struct StopsServices {
  std::vector<std::string> cluster_dirs;
  ~StopsServices() {
    for (const std::string& dir : cluster_dirs) {
      Process stop({ooze_binary(), "stop"}, {{"OOZE_CLUSTER_DIR", dir}}, dir + "-stop.log");
      stop.wait(30s);
    }
  }
};

// The line after "join other machines with:", without its indentation.
std::string printed_join_command(const std::string& banner) {
  const std::string heading = "join other machines with:\n";
  const size_t at = banner.find(heading);
  if (at == std::string::npos) return "";
  const size_t begin = banner.find_first_not_of(' ', at + heading.size());
  return banner.substr(begin, banner.find('\n', begin) - begin);
}

// Starts a head with `host_flags`, checks the host of the address it prints with `check_host`,
// runs its join command verbatim as another machine, and returns the head's banner.
std::string expect_printed_command_joins(
    const std::vector<std::string>& host_flags,
    const std::function<void(const std::string& host)>& check_host) {
  const std::string dir = ::ooze::testing::make_temp_dir("cluster-join");
  StopsServices stops{{dir + "/head-machine", dir + "/other-machine"}};
  const std::string port = std::to_string(::ooze::testing::pick_free_port());
  std::vector<std::string> argv = {ooze_binary(), "start", "--head", "--port", port};
  argv.insert(argv.end(), host_flags.begin(), host_flags.end());
  Process head(argv, {{"OOZE_CLUSTER_DIR", stops.cluster_dirs[0]}}, dir + "/head.log");
  const ExitStatus started = head.wait(60s);  // returns once the services run in the background
  EXPECT_TRUE(started.exited && started.code == 0) << started.describe() << head.output();

  const std::string command = printed_join_command(head.output());
  EXPECT_EQ(command.rfind("ooze start --address ", 0), 0u) << head.output();
  if (command.rfind("ooze start --address ", 0) != 0) return head.output();
  const std::string address = command.substr(21, command.find(' ', 21) - 21);
  EXPECT_EQ(address.substr(address.rfind(':') + 1), port);
  check_host(address.substr(0, address.rfind(':')));

  // Pasted as printed, with `ooze` on PATH and no token of the head's machine around.
  const std::string bin_dir = std::filesystem::path(ooze_binary()).parent_path().string();
  Process join({"/bin/sh", "-c", "PATH='" + bin_dir + "':\"$PATH\" " + command},
               {{"OOZE_CLUSTER_DIR", stops.cluster_dirs[1]}, {"OOZE_CLUSTER_TOKEN", ""}},
               dir + "/join.log");
  const ExitStatus joined = join.wait(60s);
  EXPECT_TRUE(joined.exited && joined.code == 0) << joined.describe() << join.output();
  EXPECT_CONTAINS(join.output(), "joined " + address);

  const std::string token = command.substr(command.rfind(' ') + 1);
  Process status({ooze_binary(), "status", "--address", address, "--token", token},
                 {{"OOZE_CLUSTER_DIR", stops.cluster_dirs[1]}}, dir + "/status.log");
  const ExitStatus listed = status.wait(30s);
  EXPECT_TRUE(listed.exited && listed.code == 0) << listed.describe() << status.output();
  EXPECT_CONTAINS(status.output(), "nodes (2 alive of 2)");
  return head.output();
}

TEST(ClusterJoinTest, WithoutHostTheHeadNamesThisMachinesAddress) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::set<std::string> addresses = non_loopback_addresses();
  if (addresses.empty()) GTEST_SKIP() << "this machine has no network address but loopback";
  // Which of the machine's addresses the head names is its choice (the default route's); it
  // must be one of them, and the command it prints must work.
  const std::string banner = expect_printed_command_joins({}, [&](const std::string& host) {
    EXPECT_EQ(addresses.count(host), 1u) << "named " << host;
  });
  EXPECT_EQ(banner.find("loopback"), std::string::npos) << banner;
}

TEST(ClusterJoinTest, ALoopbackHostIsNamedAndSaysOnlyThisMachineCanJoin) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string banner = expect_printed_command_joins(
      {"--host", "127.0.0.2"}, [](const std::string& host) { EXPECT_EQ(host, "127.0.0.2"); });
  EXPECT_CONTAINS(banner, "listening on loopback only: other machines cannot join");
}

}  // namespace cluster_join_test
}  // namespace ooze::launcher
