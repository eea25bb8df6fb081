#include "launcher/cluster_command.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "actors/client.h"
#include "actors/head.h"
#include "actors/node_agent.h"
#include "core/atomic_file.h"
#include "core/config.h"
#include "core/error.h"

namespace ooze::launcher {
namespace {

namespace fs = std::filesystem;
using actors::Security;

// Where start keeps its pid files, logs and the token ($OOZE_CLUSTER_DIR overrides, for tests).
const std::string kClusterDir = std::getenv("OOZE_CLUSTER_DIR") != nullptr
                                    ? std::getenv("OOZE_CLUSTER_DIR")
                                    : "/tmp/ooze/cluster";

ConfigSchema start_schema() {
  ConfigSchema schema;
  schema.section("start");
  schema.add_bool("head", false, "Start the head (and a node) on this machine.");
  schema.add_string("address", "", "HEAD_IP:PORT of the head to join (not with --head).");
  schema.add_string("host", "127.0.0.1",
                    "With --head: the IP the head listens on (other machines must reach it); "
                    "loopback by default.");
  schema.add_int("port", 6380, "With --head: the head's port.").min(1).max(65535);
  schema.add_string("node_ip", "",
                    "The IP this node's workers listen on; default: --host for the head, else "
                    "127.0.0.1 when the head is on loopback.");
  schema.add_string(
      "resources", "",
      "This node's resources as JSON, e.g. {\"CPU\":8,\"GPU\":4}; default: detected.");
  schema.add_string("token", "",
                    "Cluster token; --head generates one when empty, a joining node reads "
                    "$OOZE_CLUSTER_TOKEN or /tmp/ooze/cluster/token.");
  schema.add_int("node_timeout_ms", 10000, "With --head: a node silent this long is dead.")
      .min(100);
  schema
      .add_int("client_timeout_ms", 5000,
               "With --head: a driver silent this long is gone and its actors are killed.")
      .min(100);
  schema.add_bool("block", false, "Stay in the foreground until SIGTERM/SIGINT.");
  schema.add_check("head_or_address", [](const Config& c) -> std::string {
    bool head = c.get<bool>("head");
    bool address = !c.get<std::string>("address").empty();
    if (head == address) return "give exactly one of --head and --address HEAD_IP:PORT";
    return "";
  });
  return schema;
}

ConfigSchema status_schema() {
  ConfigSchema schema;
  schema.section("status");
  schema.add_string("address", "127.0.0.1:6380", "HEAD_IP:PORT of the head.");
  schema.add_string("token", "", "Cluster token (default: $OOZE_CLUSTER_TOKEN or the saved one).");
  return schema;
}

std::string saved_token() {
  if (const char* token = std::getenv("OOZE_CLUSTER_TOKEN")) return token;
  std::ifstream file(kClusterDir + "/token");
  std::string token;
  file >> token;
  return token;
}

// Readable by its owner only, from the moment the file exists: the token grants full control of
// the cluster. Throws IoError naming the path when it cannot be written.
void save_token(const std::string& token) {
  fs::create_directories(kClusterDir);
  AtomicFile file(kClusterDir + "/token", 0600);
  file.write(token + "\n");
  file.commit();
}

std::string pid_file() { return kClusterDir + "/ooze-" + std::to_string(getpid()) + ".pid"; }

// Blocks SIGTERM and SIGINT in every thread started after this, and waits for one.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Runs in the foreground: the services, until a stop signal or (for a node) the head is lost.
int serve(const Config& flags, int ready_fd) {
  sigset_t signals = block_stop_signals();
  fs::create_directories(kClusterDir);
  { std::ofstream(pid_file()) << getpid() << "\n"; }
  std::string token = flags.get<std::string>("token");
  bool is_head = flags.get<bool>("head");
  if (token.empty()) token = is_head ? Security::generate_token() : saved_token();
  if (token.empty()) {
    throw ConfigError(
        "no cluster token: pass --token (printed by `ooze start --head`) or set "
        "OOZE_CLUSTER_TOKEN");
  }
  Security security = Security::from_token(token);
  std::string resources_json = flags.get<std::string>("resources");
  actors::ResourceSet resources = resources_json.empty() ? actors::detect_node_resources()
                                                         : actors::parse_resources(resources_json);
  std::unique_ptr<actors::Head> head;
  std::string head_address = flags.get<std::string>("address");
  std::string node_ip = flags.get<std::string>("node_ip");
  if (is_head) {
    actors::HeadOptions options;
    options.endpoint = "tcp://" + flags.get<std::string>("host") + ":" +
                       std::to_string(flags.get<int64_t>("port"));
    options.security = security;
    options.node_timeout = std::chrono::milliseconds(flags.get<int64_t>("node_timeout_ms"));
    options.client_timeout = std::chrono::milliseconds(flags.get<int64_t>("client_timeout_ms"));
    head = std::make_unique<actors::Head>(options);
    head_address =
        flags.get<std::string>("host") + ":" + std::to_string(flags.get<int64_t>("port"));
    save_token(token);
    if (node_ip.empty()) node_ip = flags.get<std::string>("host");
  }
  if (node_ip.empty()) node_ip = "127.0.0.1";
  actors::NodeOptions node_options;
  node_options.head_endpoint = "tcp://" + head_address;
  node_options.security = security;
  node_options.address = node_ip;
  node_options.ipc_workers = false;
  node_options.resources = resources;
  node_options.session_dir = kClusterDir + "/node_" + std::to_string(getpid());
  actors::NodeAgent node(node_options);

  std::ostringstream banner;
  if (is_head) {
    banner << "ooze head listening at " << head_address << " with node " << node.node_id() << " "
           << actors::format_resources(resources) << "\n"
           << "join other machines with:\n  ooze start --address " << head_address << " --token "
           << token << "\n"
           << "drivers: OOZE_CLUSTER_TOKEN=" << token << " and address " << head_address << "\n";
  } else {
    banner << "ooze node " << node.node_id() << " " << actors::format_resources(resources)
           << " joined " << head_address << "\n";
  }
  std::cout << banner.str() << std::flush;
  if (ready_fd >= 0) {
    std::string text = banner.str();
    ssize_t ignored = write(ready_fd, text.data(), text.size());
    (void)ignored;
    close(ready_fd);
  }
  // Wait for a stop signal, or for the node to end on its own (the head was lost).
  std::thread waiter([&] {
    node.wait();
    kill(getpid(), SIGTERM);
  });
  int signal = 0;
  sigwait(&signals, &signal);
  node.stop();
  waiter.join();
  if (head) head->stop();
  fs::remove(pid_file());
  return 0;
}

}  // namespace

int run_start_command(const std::vector<std::string>& args) {
  const Config flags = load_config(start_schema(), "", args);
  if (flags.get<bool>("block")) return serve(flags, -1);
  // In the background: a daemon child runs the services; the parent returns once they are up.
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw IoError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw IoError("fork failed");
  if (pid == 0) {
    close(pipe_fds[0]);
    setsid();
    fs::create_directories(kClusterDir);
    std::string log = kClusterDir + "/ooze-" + std::to_string(getpid()) + ".log";
    FILE* out = std::freopen(log.c_str(), "a", stdout);
    FILE* err = std::freopen(log.c_str(), "a", stderr);
    (void)out;
    (void)err;
    try {
      _exit(serve(flags, pipe_fds[1]));
    } catch (const std::exception& error) {
      std::string text = std::string("error: ") + error.what() + "\n";
      ssize_t ignored = write(pipe_fds[1], text.data(), text.size());
      (void)ignored;
      _exit(1);
    }
  }
  close(pipe_fds[1]);
  std::string report;
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) report.append(buffer, n);
  close(pipe_fds[0]);
  if (report.empty() || report.rfind("error: ", 0) == 0) {
    std::cerr << "ooze start: " << (report.empty() ? "the services did not start\n" : report);
    return 1;
  }
  std::cout << report << "(running in the background as pid " << pid << "; `ooze stop` ends it)\n";
  return 0;
}

int run_status_command(const std::vector<std::string>& args) {
  const Config flags = load_config(status_schema(), "", args);
  std::string token = flags.get<std::string>("token");
  if (token.empty()) token = saved_token();
  if (token.empty()) throw ConfigError("no cluster token: pass --token or set OOZE_CLUSTER_TOKEN");
  actors::Client client("tcp://" + flags.get<std::string>("address"), Security::from_token(token),
                        /*is_driver=*/false);
  auto status = client.ask_head<actors::ClusterStatus>(actors::method::kStatus, std::string());
  std::cout << actors::format_status(status);
  return 0;
}

int run_stop_command(const std::vector<std::string>&) {
  if (!fs::exists(kClusterDir)) {
    std::cout << "nothing to stop\n";
    return 0;
  }
  std::vector<pid_t> stopping;
  for (const auto& entry : fs::directory_iterator(kClusterDir)) {
    if (entry.path().extension() != ".pid") continue;
    pid_t pid = 0;
    std::ifstream(entry.path()) >> pid;
    if (pid > 0 && kill(pid, SIGTERM) == 0) {
      stopping.push_back(pid);
    } else {
      fs::remove(entry.path());  // stale
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : stopping) {
    while (kill(pid, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (kill(pid, 0) == 0) kill(pid, SIGKILL);
    fs::remove(kClusterDir + "/ooze-" + std::to_string(pid) + ".pid");
    std::cout << "stopped ooze services (pid " << pid << ")\n";
  }
  if (stopping.empty()) std::cout << "nothing to stop\n";
  return 0;
}

}  // namespace ooze::launcher
