// The cluster recipes of examples/cluster/, run and checked by what their platforms use:
//   * slurm.sbatch is submitted to a Slurm of the test's own on this machine (Debian's slurmctld,
//     slurmd and munged, on free ports, with a configuration in a temporary directory). The batch
//     script starts the head and a node agent and runs `ooze train`, shrunk by EXTRA_ARGS to the
//     tiny model on the CPU; the job must end 0 with its metrics, checkpoints and final model.
//   * k8s.yaml is validated against the Kubernetes API's OpenAPI schemas (kubernetes-models,
//     through tests/launcher/k8s_manifest_check.mjs), and so is a copy with a wrong type in it,
//     which must fail.
// Each skips, saying why, where its tools are missing (scripts/install-deps.sh installs them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace cluster_recipes_test {

using ::ooze::testing::ExitStatus;
using ::ooze::testing::make_temp_dir;
using ::ooze::testing::ooze_binary;
using ::ooze::testing::pick_free_port;
using ::ooze::testing::Process;
using ::ooze::testing::read_file;
using ::ooze::testing::wait_until;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const fs::path kSource = OOZE_SOURCE_DIR;

// The output and exit status of a shell command.
std::pair<std::string, int> run_shell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"", -1};
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::string manifest_check(const std::string& manifest) {
  return "NODE_PATH='" + (kSource / ".deps/npm/node_modules").string() + "' node '" +
         (kSource / "tests/launcher/k8s_manifest_check.mjs").string() + "' '" + manifest + "'";
}

TEST(ClusterRecipesTest, TheKubernetesManifestPassesTheApiSchemasAndABrokenCopyDoesNot) {
  if (run_shell("node --version").second != 0) GTEST_SKIP() << "node is not installed";
  if (!fs::exists(kSource / ".deps/npm/node_modules/kubernetes-models/package.json")) {
    GTEST_SKIP() << "the npm package kubernetes-models is not in .deps/npm "
                    "(run scripts/install-deps.sh)";
  }
  const std::string manifest = (kSource / "examples/cluster/k8s.yaml").string();
  const auto [output, status] = run_shell(manifest_check(manifest));
  EXPECT_EQ(status, 0) << output;
  for (const char* object : {"ok Service/ooze-head", "ok StatefulSet/ooze-head",
                             "ok StatefulSet/ooze-node", "ok Job/ooze-train"}) {
    EXPECT_NE(output.find(object), std::string::npos) << output;
  }

  // The validator is live: a replica count that is not an integer is refused, by name.
  const std::string broken = make_temp_dir("k8s-manifest") + "/broken.yaml";
  std::ofstream(broken) << std::regex_replace(read_file(manifest), std::regex("replicas: 1"),
                                              "replicas: \"one\"");
  const auto [refused, broken_status] = run_shell(manifest_check(broken));
  EXPECT_EQ(broken_status, 1) << refused;
  EXPECT_NE(refused.find("StatefulSet/ooze-head: data/spec/replicas must be integer"),
            std::string::npos)
      << refused;
}

// A Slurm of one node (this machine) in `dir`, its daemons children of the test.
class LocalSlurm {
 public:
  explicit LocalSlurm(const std::string& dir) : dir_(dir) {
    const std::string hostname = run_shell("hostname").first;
    const std::string host = hostname.substr(0, hostname.find('\n'));
    fs::create_directories(dir + "/state");
    fs::create_directories(dir + "/spool");
    std::ofstream(dir + "/slurm.conf")
        << "ClusterName=ooze-test\n"
        << "SlurmctldHost=" << host << "(127.0.0.1)\n"
        << "SlurmctldPort=" << pick_free_port() << "\n"
        << "SlurmdPort=" << pick_free_port() << "\n"
        << "AuthType=auth/munge\nCredType=cred/munge\n"
        << "AuthInfo=socket=" << dir << "/munge.socket\n"
        << "StateSaveLocation=" << dir << "/state\nSlurmdSpoolDir=" << dir << "/spool\n"
        << "SlurmctldPidFile=" << dir << "/slurmctld.pid\nSlurmdPidFile=" << dir << "/slurmd.pid\n"
        << "SlurmctldLogFile=" << dir << "/slurmctld.log\nSlurmdLogFile=" << dir << "/slurmd.log\n"
        << "SlurmUser=root\nSlurmdUser=root\n"
        // No cgroups here: processes tracked through /proc, no task binding.
        << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        << "SchedulerType=sched/builtin\nSelectType=select/cons_tres\n"
        << "SelectTypeParameters=CR_Core\nReturnToService=2\nMpiDefault=none\n"
        << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        << "NodeName=" << host << " NodeAddr=127.0.0.1 CPUs=" << ::sysconf(_SC_NPROCESSORS_ONLN)
        << " State=UNKNOWN\n"
        << "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    env_ = {{"SLURM_CONF", dir + "/slurm.conf"}};
    const auto key =
        run_shell("/usr/sbin/mungekey --create --force --keyfile '" + dir + "/munge.key'");
    if (key.second != 0) throw std::runtime_error("mungekey failed: " + key.first);
    daemons_.emplace_back(
        std::vector<std::string>{
            "/usr/sbin/munged", "--foreground", "--force", "--key-file=" + dir + "/munge.key",
            "--socket=" + dir + "/munge.socket", "--pid-file=" + dir + "/munged.pid",
            "--seed-file=" + dir + "/munge.seed", "--log-file=" + dir + "/munged.log"},
        env_, dir + "/munged.out");
    wait_until([&] { return fs::exists(dir + "/munge.socket"); }, 10s);
    daemons_.emplace_back(std::vector<std::string>{"/usr/sbin/slurmctld", "-D"}, env_,
                          dir + "/slurmctld.out");
    daemons_.emplace_back(std::vector<std::string>{"/usr/sbin/slurmd", "-D"}, env_,
                          dir + "/slurmd.out");
  }

  // Until sinfo shows the node idle (or `timeout` passes).
  bool wait_idle(std::chrono::seconds timeout) {
    return wait_until(
        [&] {
          return run_shell(with_conf("sinfo -h -o %t")).first.find("idle") != std::string::npos;
        },
        timeout);
  }

  std::string with_conf(const std::string& command) const {
    return "SLURM_CONF='" + dir_ + "/slurm.conf' " + command;
  }

  std::string logs() const {
    return read_file(dir_ + "/slurmctld.log") + read_file(dir_ + "/slurmd.log");
  }

 private:
  std::string dir_;
  std::map<std::string, std::string> env_;
  std::vector<Process> daemons_;
};

TEST(ClusterRecipesTest, TheSlurmBatchScriptRunsAShortTrainOnALocalSlurm) {
  for (const char* tool : {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged",
                           "/usr/bin/sbatch", "/usr/sbin/mungekey"}) {
    if (!fs::exists(tool)) GTEST_SKIP() << tool << " is not installed (scripts/install-deps.sh)";
  }
  if (::geteuid() != 0) GTEST_SKIP() << "slurmd runs as root";
  if (!fs::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";

  const std::string dir = make_temp_dir("slurm-recipe");
  LocalSlurm slurm(dir + "/slurm");
  ASSERT_TRUE(slurm.wait_idle(30s)) << "the Slurm node did not come up:\n" << slurm.logs();

  // The recipe's data files, with the tiny model's prompts.
  fs::create_directories(dir + "/data");
  for (const char* name : {"/data/dapo-math-17k.jsonl", "/data/aime-2024.jsonl"}) {
    std::ofstream out(dir + name);
    for (int i = 0; i < 8; ++i) {
      out << "{\"prompt\": \"" << i << "+" << i << "=\", \"label\": \"" << 2 * i << "\"}\n";
    }
  }
  // The recipe's job on 2 nodes of 8 GPUs, shrunk to this machine: one node, no GPU, one
  // trainer rank and one engine, two rollouts of the tiny model.
  const std::string extra =
      "--actor-num-gpus-per-node 1 --rollout-num-gpus 1 --num-rollout 2 --rollout-batch-size 2 "
      "--n-samples-per-prompt 2 --global-batch-size 4 --rollout-max-response-len 4 "
      "--eval-max-response-len 4 --n-samples-per-eval-prompt 1 --eval-interval 2 "
      "--save-interval 1 --engine-max-running-requests 8 --engine-kv-cache-memory-mb 64";
  const std::string out = dir + "/out";
  const std::string submit = slurm.with_conf(
      "OOZE='" + ooze_binary() + "' MODEL='" + ::ooze::testing::tiny_model_dir() + "' DATA='" +
      dir + "/data' OUT='" + out + "' PORT=" + std::to_string(pick_free_port()) + " EXTRA_ARGS='" +
      extra +
      "' OMP_NUM_THREADS=1 timeout 240 sbatch --wait --nodes=1 --gpus-per-node=0 "
      "--cpus-per-task=" +
      std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) + " --time=5 --output='" + dir +
      "/job.log' '" + (kSource / "examples/cluster/slurm.sbatch").string() + "'");
  const auto [submitted, status] = run_shell(submit);
  const std::string job_log = read_file(dir + "/job.log");
  ASSERT_EQ(status, 0) << submitted << "\n" << job_log << "\n" << read_file(out + "/ooze-head.log");

  EXPECT_NE(job_log.find("nodes (1 alive of 1)"), std::string::npos) << job_log;
  const auto lines = ::ooze::testing::read_json_lines(out + "/metrics.jsonl");
  int rollouts = 0;
  for (const auto& line : lines) rollouts += line.contains("perf/step_time");
  EXPECT_EQ(rollouts, 2) << job_log;
  EXPECT_EQ(read_file(out + "/checkpoints/latest_checkpointed_iteration.txt"), "2\n");
  EXPECT_TRUE(fs::exists(out + "/final/config.json")) << job_log;
  EXPECT_NE(job_log.find("final policy written to " + out + "/final"), std::string::npos)
      << job_log;
}

}  // namespace cluster_recipes_test
}  // namespace ooze::launcher
