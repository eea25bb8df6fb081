// `ooze train --address` on a cluster of real processes started as users start them on each
// machine (`ooze start --block`): a head with no resources of its own and two node agents of 2
// CPU slots each, at 127.0.0.2 and 127.0.0.3 as if they were two machines. Jobs of 4 slots
// (2 ranks and 2 engines apart, or 4 ranks each with its engine) must span both nodes, and one of
// 6 is refused before any of its processes starts. The driver finds the cluster's token where
// `ooze start` saved it, as on the head's machine.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace ooze::launcher {
namespace train_cluster_test {

using nlohmann::json;
using ::ooze::testing::ExitStatus;
using ::ooze::testing::ooze_binary;
using ::ooze::testing::Process;
using namespace std::chrono_literals;

// A worker's log is named CLASS-ACTOR_ID-PID.out: the class (with its rank) and the pid.
struct WorkerLog {
  std::string label;
  pid_t pid = 0;
};

// Whether `pid` is gone (or a zombie its node agent has not reaped yet) within `timeout`.
bool ends_within(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, name, state;
    if (!(stat >> pid_field >> name >> state) || state == "Z") return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

class TrainClusterTest : public ::testing::Test {
 protected:
  static constexpr const char* kNodeAddresses[] = {"127.0.0.2", "127.0.0.3"};

  void SetUp() override {
    if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
    dir_ = ::ooze::testing::make_temp_dir("train-cluster");
    cluster_dir_ = dir_ + "/cluster";
    const std::string port = std::to_string(::ooze::testing::pick_free_port());
    address_ = "127.0.0.1:" + port;
    head_ = start_service("head",
                          {"--head", "--host", "127.0.0.1", "--port", port, "--resources", "{}"});
    // Nodes join with the token the head saved in the cluster directory.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!std::filesystem::exists(cluster_dir_ + "/token")) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << head_->output();
      std::this_thread::sleep_for(20ms);
    }
    for (const char* node_address : kNodeAddresses) {
      nodes_.push_back(start_service(
          std::string("node-") + node_address,
          {"--address", address_, "--node-ip", node_address, "--resources", R"({"CPU":2})"}));
    }
    std::string status;
    while (status.find("nodes (3 alive of 3)") == std::string::npos) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << status;
      std::this_thread::sleep_for(100ms);
      status = ooze({"status", "--address", address_}, "status");
    }
  }

  // `ooze stop` ends what `ooze start` started with this cluster directory: every service exits
  // cleanly, and with it every worker it still had.
  void TearDown() override {
    if (head_ == nullptr) return;
    // The services are this process's children: reaped here while `ooze stop` waits for them.
    Process stop({ooze_binary(), "stop"}, environment(), dir_ + "/stop.log");
    for (std::unique_ptr<Process>* service : services()) {
      const ExitStatus status = (*service)->wait(20s);
      EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << "\n"
                                                     << (*service)->output();
    }
    const ExitStatus stopped = stop.wait(20s);
    EXPECT_TRUE(stopped.exited && stopped.code == 0) << stopped.describe() << stop.output();
    for (size_t n = 0; n < node_pids_.size(); ++n) {
      for (const WorkerLog& worker : worker_logs(n)) {
        EXPECT_TRUE(ends_within(worker.pid, 5s)) << worker.label << " pid " << worker.pid;
      }
    }
  }

  std::map<std::string, std::string> environment() const {
    // No token in the environment: commands find the one `ooze start --head` saved.
    return {
        {"OOZE_CLUSTER_DIR", cluster_dir_}, {"OOZE_CLUSTER_TOKEN", ""}, {"OMP_NUM_THREADS", "1"}};
  }

  std::unique_ptr<Process> start_service(const std::string& name,
                                         const std::vector<std::string>& flags) {
    std::vector<std::string> command = {ooze_binary(), "start", "--block"};
    command.insert(command.end(), flags.begin(), flags.end());
    auto service = std::make_unique<Process>(command, environment(), dir_ + "/" + name + ".log");
    if (name != "head") node_pids_.push_back(service->pid());
    return service;
  }

  std::vector<std::unique_ptr<Process>*> services() {
    std::vector<std::unique_ptr<Process>*> all = {&head_};
    for (auto& node : nodes_) all.push_back(&node);
    return all;
  }

  // Runs `ooze ARGS` to the end and returns what it printed.
  std::string ooze(const std::vector<std::string>& args, const std::string& name,
                   ExitStatus* status = nullptr, std::chrono::seconds timeout = 30s) {
    std::vector<std::string> command = {ooze_binary()};
    command.insert(command.end(), args.begin(), args.end());
    Process run(command, environment(), dir_ + "/" + name + ".log");
    const ExitStatus exit = run.wait(timeout);
    if (status != nullptr) *status = exit;
    return run.output();
  }

  // The launcher tests' tiny `ooze train` (without the binary: ooze() adds it) on this
  // cluster, with `flags`.
  std::vector<std::string> train_args(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--address", address_});
    std::vector<std::string> args = ::ooze::testing::tiny_train_command(dir_, flags);
    args.erase(args.begin());
    return args;
  }

  // The workers node `n` (in kNodeAddresses' order) started, from the logs in its session
  // directory, sorted by label.
  std::vector<WorkerLog> worker_logs(size_t n) const {
    std::vector<WorkerLog> workers;
    const std::string logs = cluster_dir_ + "/node_" + std::to_string(node_pids_.at(n)) + "/logs";
    if (!std::filesystem::exists(logs)) return workers;
    for (const auto& entry : std::filesystem::directory_iterator(logs)) {
      if (entry.path().extension() != ".out") continue;
      const std::string stem = entry.path().stem().string();  // CLASS-ACTOR_ID-PID
      const size_t pid_dash = stem.rfind('-');
      const size_t id_dash = stem.rfind('-', pid_dash - 1);
      workers.push_back({stem.substr(0, id_dash), std::stoi(stem.substr(pid_dash + 1))});
    }
    std::sort(workers.begin(), workers.end(),
              [](const WorkerLog& a, const WorkerLog& b) { return a.label < b.label; });
    return workers;
  }

  std::vector<std::string> worker_labels(size_t n) const {
    std::vector<std::string> labels;
    for (const WorkerLog& worker : worker_logs(n)) labels.push_back(worker.label);
    return labels;
  }

  // Every rollout and step line in OUT/metrics.jsonl, after checking that the weights of sync k
  // sampled rollout k: the trainer's weights reached the engines each time.
  void expect_rollouts_with_fresh_weights(size_t rollouts) {
    std::vector<json> rollout_lines, step_lines;
    for (const json& line : ::ooze::testing::read_json_lines(dir_ + "/out/metrics.jsonl")) {
      (line.contains("train/step") ? step_lines : rollout_lines).push_back(line);
    }
    ASSERT_EQ(rollout_lines.size(), rollouts);
    EXPECT_EQ(step_lines.size(), 2 * rollouts);
    for (size_t k = 0; k < rollouts; ++k) {
      EXPECT_EQ(rollout_lines[k]["step"], k);
      EXPECT_EQ(rollout_lines[k]["rollout/oldest_weight_version"], k) << "stale weights at " << k;
      EXPECT_GT(rollout_lines[k]["perf/update_weights_bytes"].get<double>(), 0) << k;
    }
  }

  std::string dir_, cluster_dir_, address_;
  std::unique_ptr<Process> head_;
  std::vector<std::unique_ptr<Process>> nodes_;
  std::vector<pid_t> node_pids_;
};

TEST_F(TrainClusterTest, DisaggregatedRanksAndEnginesRunOnTheirOwnNodes) {
  ExitStatus status;
  const std::string output = ooze(train_args({"--actor-num-gpus-per-node", "2",
                                              "--rollout-num-gpus", "2", "--num-rollout", "3"}),
                                  "train", &status, 120s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << output;
  expect_rollouts_with_fresh_weights(3);
  // Packed in node-address order: the trainer's 2 ranks fill the first node, the engines the
  // second; the head's node has no slot and hosts nothing.
  EXPECT_EQ(worker_labels(0), (std::vector<std::string>{"TrainActor_rank_0", "TrainActor_rank_1"}));
  EXPECT_EQ(worker_labels(1), (std::vector<std::string>{"RolloutEngine", "RolloutEngine"}));
  EXPECT_CONTAINS(output, "placed on 2 nodes: 127.0.0.2");
  // The driver's router reached the engines at their node's address, as it must from another
  // machine (not at the loopback of the engines' own machine).
  EXPECT_CONTAINS(output, "engines serving at http://127.0.0.3:");
  // The job's workers end with the driver, while the cluster stays up for the next job.
  for (size_t n = 0; n < 2; ++n) {
    for (const WorkerLog& worker : worker_logs(n)) {
      EXPECT_TRUE(ends_within(worker.pid, 10s)) << worker.label << " outlived its driver";
    }
  }
  EXPECT_CONTAINS(ooze({"status", "--address", address_}, "status-after"), "nodes (3 alive of 3)");
}

TEST_F(TrainClusterTest, ColocatedRanksAndEnginesSpanBothNodes) {
  ExitStatus status;
  const std::string output =
      ooze(train_args({"--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "4", "--colocate",
                       "--num-rollout", "2"}),
           "train", &status, 120s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << output;
  expect_rollouts_with_fresh_weights(2);
  // Each node holds two bundles, each a rank with its engine (weights through shared memory).
  const std::vector<std::vector<std::string>> expected = {
      {"RolloutEngine", "RolloutEngine", "TrainActor_rank_0", "TrainActor_rank_1"},
      {"RolloutEngine", "RolloutEngine", "TrainActor_rank_2", "TrainActor_rank_3"}};
  EXPECT_EQ(worker_labels(0), expected[0]);
  EXPECT_EQ(worker_labels(1), expected[1]);
}

TEST_F(TrainClusterTest, AJobLargerThanTheClusterIsRefusedBeforeAnyProcessStarts) {
  ExitStatus status;
  const auto started = std::chrono::steady_clock::now();
  // 4 trainer ranks and 2 engines of their own: 6 slots on a cluster of 4.
  const std::string output = ooze(train_args({"--actor-num-gpus-per-node", "4",
                                              "--rollout-num-gpus", "2", "--num-rollout", "1"}),
                                  "train", &status, 60s);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe() << "\n" << output;
  EXPECT_LT(took, 15s) << "the refusal waited for resources that can never come";
  EXPECT_CONTAINS(output, "the cluster at " + address_ + " cannot hold this job's 6 bundles");
  EXPECT_CONTAINS(output, "--actor-num-nodes * --actor-num-gpus-per-node = 4");
  EXPECT_CONTAINS(output, "--rollout-num-gpus = 2, disaggregated");
  EXPECT_CONTAINS(output, R"({"CPU":4} in all)");
  EXPECT_CONTAINS(output, "use --colocate");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/out/metrics.jsonl"));
  EXPECT_TRUE(worker_logs(0).empty() && worker_logs(1).empty()) << "a worker started";
  const std::string cluster = ooze({"status", "--address", address_}, "status-after");
  EXPECT_CONTAINS(cluster, "placement groups (0)");
  EXPECT_CONTAINS(cluster, R"(available {"CPU":2} of {"CPU":2})");
}

TEST(TrainClusterTokenTest, JoiningWithoutTheTokenSaysWhereItIsFound) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("train-cluster-token");
  std::ofstream(dir + "/train.jsonl") << R"({"input": "1+1=", "label": "2"})"
                                      << "\n";
  Process run(
      {ooze_binary(), "train", "--address",
       "127.0.0.1:" + std::to_string(::ooze::testing::pick_free_port()), "--hf-checkpoint",
       ::ooze::testing::tiny_model_dir(), "--prompt-data", dir + "/train.jsonl", "--rm-type",
       "random", "--num-rollout", "1", "--rollout-batch-size", "1", "--output-dir", dir + "/out"},
      {{"OOZE_CLUSTER_DIR", dir + "/no-cluster"}, {"OOZE_CLUSTER_TOKEN", ""}}, dir + "/log.txt");
  const ExitStatus status = run.wait(30s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe();
  EXPECT_CONTAINS(run.output(), "joins a cluster, which needs its token: set OOZE_CLUSTER_TOKEN");
  EXPECT_CONTAINS(run.output(), "$OOZE_CLUSTER_DIR/token");
}

}  // namespace train_cluster_test
}  // namespace ooze::launcher
