// A cluster of real processes on loopback: a head (`ooze start --head`) and node agents
// (`ooze start --address`) with declared resources, a driver joining with the cluster token.
// Placement strategies, bundle order, pending groups, node death, authentication, and drivers
// that are killed (cluster and embedded) leaving no worker behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "actors/actor_group.h"
#include "actors/placement_group.h"
#include "actors/runtime.h"
#include "actors/wire.h"
#include "tests/actors/test_actors.h"
#include "tests/support/process.h"

namespace ooze::actors {
namespace cluster_test {

using ::ooze::testing::ooze_binary;

using testing::Counter;
using testing::process_gone;
using Clock = std::chrono::steady_clock;
using Process = ::ooze::testing::Process;

constexpr int kTimeoutMs = 1500;  // node and driver liveness timeouts of the test head

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

int alive_nodes() {
  int alive = 0;
  for (const NodeInfo& node : cluster_status().nodes) alive += node.alive ? 1 : 0;
  return alive;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::ooze::testing::make_temp_dir("cluster"));
    token_ = new std::string(Security::generate_token());
    address_ = new std::string("127.0.0.1:" + std::to_string(::ooze::testing::pick_free_port()));
    processes_ = new std::vector<Process>();
    std::string port = address_->substr(address_->find(':') + 1);
    processes_->push_back(start({"--head", "--host", "127.0.0.1", "--port", port, "--resources",
                                 R"({"CPU":4})", "--node-timeout-ms", std::to_string(kTimeoutMs),
                                 "--client-timeout-ms", std::to_string(kTimeoutMs)}));
    for (int i = 0; i < 2; ++i) {
      processes_->push_back(start({"--address", *address_, "--resources", R"({"CPU":4,"GPU":4})"}));
    }
    RuntimeOptions options;
    options.address = *address_;
    options.token = *token_;
    options.worker_executable = testing::worker_program();
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (true) {  // the head process may still be starting
      try {
        options.connect_timeout = std::chrono::seconds(2);
        init(options);
        break;
      } catch (const RuntimeError&) {
        if (Clock::now() > deadline) throw;
      }
    }
    ASSERT_TRUE(wait_until([] { return alive_nodes() == 3; }, std::chrono::seconds(20)))
        << format_status(cluster_status());
  }

  static void TearDownTestSuite() {
    shutdown();
    delete processes_;  // kills the services
  }

  static Process start(std::vector<std::string> flags, const std::string& token = "") {
    std::vector<std::string> argv{ooze_binary(), "start", "--block", "--token",
                                  token.empty() ? *token_ : token};
    argv.insert(argv.end(), flags.begin(), flags.end());
    static int count = 0;
    return Process(argv, {{"OOZE_CLUSTER_DIR", *dir_}},
                   *dir_ + "/service-" + std::to_string(count++) + ".log");
  }

  static std::string* dir_;
  static std::string* token_;
  static std::string* address_;
  static std::vector<Process>* processes_;
};
std::string* ClusterTest::dir_ = nullptr;
std::string* ClusterTest::token_ = nullptr;
std::string* ClusterTest::address_ = nullptr;
std::vector<Process>* ClusterTest::processes_ = nullptr;

TEST_F(ClusterTest, StatusCommandListsEveryNode) {
  Process status({ooze_binary(), "status", "--address", *address_, "--token", *token_}, {},
                 *dir_ + "/status.log");
  auto exit = status.wait(std::chrono::seconds(20));
  ASSERT_TRUE(exit.exited && exit.code == 0) << exit.describe() << status.output();
  std::string output = status.output();
  EXPECT_NE(output.find("nodes (3 alive of 3)"), std::string::npos) << output;
  EXPECT_NE(output.find(R"({"CPU":4,"GPU":4})"), std::string::npos) << output;
}

// The head saves the token for later `ooze status` and joining nodes: whole, owner-only, and
// with no temporary left beside it.
TEST_F(ClusterTest, HeadSavesTheTokenReadableByItsOwnerOnly) {
  const std::string path = *dir_ + "/token";
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0) << path << ": " << std::strerror(errno);
  EXPECT_EQ(info.st_mode & 0777, 0600u) << std::oct << (info.st_mode & 0777);
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  EXPECT_EQ(content.str(), *token_ + "\n");
  for (const auto& entry : std::filesystem::directory_iterator(*dir_)) {
    EXPECT_EQ(entry.path().filename().string().find("token.tmp"), std::string::npos)
        << entry.path();
  }
}

TEST_F(ClusterTest, SpreadPutsBundlesOnDistinctNodes) {
  auto group = PlacementGroup::create({{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, "SPREAD");
  group.ready(std::chrono::seconds(10));
  std::set<std::string> nodes;
  for (const BundleInfo& bundle : group.bundles()) nodes.insert(bundle.node_id);
  EXPECT_EQ(nodes.size(), 3u);
  group.remove();
}

TEST_F(ClusterTest, PackKeepsBundlesOnOneNodeInGpuOrder) {
  auto group = PlacementGroup::create(std::vector<ResourceSet>(4, {{"GPU", 1}}), "PACK");
  group.ready(std::chrono::seconds(10));
  std::set<std::string> nodes;
  std::vector<int> gpus;
  for (const BundleInfo& bundle : group.bundles()) {
    nodes.insert(bundle.node_id);
    ASSERT_EQ(bundle.gpu_ids.size(), 1u);
    gpus.push_back(bundle.gpu_ids[0]);
  }
  EXPECT_EQ(nodes.size(), 1u);
  EXPECT_EQ(gpus, (std::vector<int>{0, 1, 2, 3}));
  group.remove();
}

TEST_F(ClusterTest, ImpossibleGroupsFailAtCreateNamingWhatIsMissing) {
  try {
    PlacementGroup::create(std::vector<ResourceSet>(4, {{"CPU", 1}}), "STRICT_SPREAD");
    FAIL() << "expected PlacementError";
  } catch (const PlacementError& error) {
    EXPECT_NE(std::string(error.what()).find("3"), std::string::npos) << error.what();
  }
  try {
    PlacementGroup::create(std::vector<ResourceSet>(6, {{"GPU", 1}}), "STRICT_PACK");
    FAIL() << "expected PlacementError";
  } catch (const PlacementError& error) {
    EXPECT_NE(std::string(error.what()).find("GPU"), std::string::npos) << error.what();
  }
}

TEST_F(ClusterTest, GroupRanksFollowBundlesAndGetTheirGpus) {
  auto group = PlacementGroup::create(std::vector<ResourceSet>(4, {{"GPU", 1}}), "SPREAD");
  group.ready(std::chrono::seconds(10));
  ActorGroupOptions options;
  options.actor.resources = {{"GPU", 1}};
  options.placement_group = &group;
  auto trainers = ActorGroup<Counter>::spawn(4, options, 0);
  std::map<std::string, int> per_node;
  for (int rank = 0; rank < 4; ++rank) {
    const BundleInfo& bundle = group.bundles()[rank];
    EXPECT_EQ(trainers[rank].call(&Counter::env, std::string("CUDA_VISIBLE_DEVICES")).get(),
              std::to_string(bundle.gpu_ids[0]));
    EXPECT_EQ(trainers[rank].call(&Counter::env, std::string("RANK")).get(), std::to_string(rank));
    EXPECT_EQ(trainers[rank].call(&Counter::env, std::string("LOCAL_RANK")).get(),
              std::to_string(per_node[bundle.node_id]++));
    EXPECT_EQ(trainers[rank].info().node_id, bundle.node_id);
  }
  EXPECT_EQ(per_node.size(), 2u);  // SPREAD over the two GPU nodes, two ranks each
  group.remove();
  EXPECT_THROW(trainers[0].call(&Counter::get).get(), ActorDiedError);
}

TEST_F(ClusterTest, PendingGroupWaitsForResourcesAndSaysWhichAreMissing) {
  auto all_gpus = PlacementGroup::create(std::vector<ResourceSet>(8, {{"GPU", 1}}), "PACK");
  all_gpus.ready(std::chrono::seconds(10));
  auto waiting = PlacementGroup::create({{{"GPU", 1}}}, "PACK");
  try {
    waiting.ready(std::chrono::milliseconds(500));
    FAIL() << "expected PlacementError";
  } catch (const PlacementError& error) {
    EXPECT_NE(std::string(error.what()).find("GPU"), std::string::npos) << error.what();
  }
  all_gpus.remove();
  waiting.ready(std::chrono::seconds(10));
  EXPECT_TRUE(waiting.is_ready());
  waiting.remove();
}

TEST_F(ClusterTest, ClientsWithoutTheTokenAreRefused) {
  Security wrong = Security::from_token(Security::generate_token());
  EXPECT_THROW(Client("tcp://" + *address_, wrong, true, "", std::chrono::milliseconds(1500)),
               RuntimeError);
  // No CURVE at all: the head never sees the request.
  zmq::socket_t raw = connect_socket(zmq::socket_type::dealer, "tcp://" + *address_,
                                     Security::none(), kMaxControlPartBytes);
  Message request;
  request.header.id = 1;
  request.header.method = method::kStatus;
  send_message(raw, request);
  zmq::pollitem_t item{raw.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(1000)), 0);
  // A node with the wrong token never joins.
  Process intruder =
      start({"--address", *address_, "--resources", R"({"CPU":64})"}, Security::generate_token());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(cluster_status().nodes.size(), 3u);
}

TEST_F(ClusterTest, DeadNodeFailsItsActors) {
  Process node = start({"--address", *address_, "--resources", R"({"CPU":1,"doomed":1})"});
  ASSERT_TRUE(wait_until([] { return alive_nodes() == 4; }, std::chrono::seconds(20)));
  ActorOptions options;
  options.resources = {{"doomed", 1}};
  auto actor = spawn<Counter>(options, 0);
  int pid = actor.call(&Counter::pid).get();
  auto pending = actor.call(&Counter::sleep_ms, 60000);
  auto start = Clock::now();
  node.kill(SIGKILL);
  try {
    pending.get();
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    EXPECT_NE(error.reason().find("stopped heart-beating"), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(kTimeoutMs + 2000));
  EXPECT_TRUE(wait_until([&] { return process_gone(pid); }, std::chrono::seconds(2)));
  EXPECT_EQ(alive_nodes(), 3);
}

// Runs actors_test_driver (embedded when `address` is empty) and returns its actors' pids.
std::vector<int> start_driver(Process& driver) {
  std::vector<int> pids;
  wait_until([&] { return driver.output().find("PIDS") != std::string::npos; },
             std::chrono::seconds(30));
  std::string output = driver.output();
  auto line = output.find("PIDS");
  EXPECT_NE(line, std::string::npos) << output;
  if (line == std::string::npos) return pids;
  std::istringstream in(output.substr(line + 4, output.find('\n', line) - line - 4));
  for (int pid; in >> pid;) pids.push_back(pid);
  EXPECT_EQ(pids.size(), 3u) << output;
  return pids;
}

TEST_F(ClusterTest, KilledDriverTakesItsActorsAlong) {
  Process driver({::ooze::testing::build_path("tests/actors/actors_test_driver"), *address_},
                 {{"OOZE_CLUSTER_TOKEN", *token_}}, *dir_ + "/driver-cluster.log");
  std::vector<int> pids = start_driver(driver);
  for (int pid : pids) EXPECT_FALSE(process_gone(pid));
  driver.kill(SIGKILL);
  for (int pid : pids) {
    EXPECT_TRUE(
        wait_until([&] { return process_gone(pid); }, std::chrono::milliseconds(kTimeoutMs + 3000)))
        << "worker " << pid << " outlived its driver";
  }
}

TEST(EmbeddedDriverTest, KilledDriverLeavesNoWorkersAndStreamedTheirOutput) {
  std::string dir = ::ooze::testing::make_temp_dir("driver");
  Process driver({::ooze::testing::build_path("tests/actors/actors_test_driver")}, {},
                 dir + "/driver.log");
  std::vector<int> pids = start_driver(driver);
  ASSERT_EQ(pids.size(), 3u);
  // The first actor's line reached the driver's own output, prefixed with the actor.
  EXPECT_TRUE(wait_until(
      [&] {
        return driver.output().find("(Counter pid=" + std::to_string(pids[0]) +
                                    ") streamed line") != std::string::npos;
      },
      std::chrono::seconds(5)))
      << driver.output();
  driver.kill(SIGKILL);
  for (int pid : pids) {
    EXPECT_TRUE(wait_until([&] { return process_gone(pid); }, std::chrono::seconds(2)))
        << "worker " << pid << " outlived its driver";
  }
}

}  // namespace cluster_test
}  // namespace ooze::actors
