#include "launcher/cluster_command.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "actors/client.h"
#include "actors/head.h"
#include "actors/node_agent.h"
#include "core/atomic_file.h"
#include "core/config.h"
#include "core/error.h"
#include "launcher/commands.h"

namespace ooze::launcher {
namespace {

namespace fs = std::filesystem;
using actors::Security;

// Where start keeps its pid files, logs and the token ($OOZE_CLUSTER_DIR overrides, for tests).
const std::string kClusterDir = std::getenv("OOZE_CLUSTER_DIR") != nullptr
                                    ? std::getenv("OOZE_CLUSTER_DIR")
                                    : "/tmp/ooze/cluster";

ConfigSchema build_start_schema() {
  ConfigSchema schema;
  schema.section("start");
  schema.add_bool("head", false, "Start the head (and a node) on this machine.");
  schema.add_string("address", "", "HEAD_IP:PORT of the head to join (not with --head).");
  schema.add_string("host", "",
                    "With --head: the IP the head listens on. Default: every interface, other "
                    "machines joining at this machine's address (printed); 127.0.0.1 keeps the "
                    "cluster on this machine.");
  schema.add_int("port", 6380, "With --head: the head's port.").min(1).max(65535);
  schema.add_string("node_ip", "",
                    "The IP this node's workers listen on, which every other machine of the "
                    "cluster must reach; default: --host for the head (this machine's address "
                    "when it listens on every interface), else this machine's address on the "
                    "route to the head (127.0.0.1 when the head is on loopback).");
  schema.add_string(
      "resources", "",
      "This node's resources as JSON, e.g. {\"CPU\":8,\"GPU\":4}; default: detected.");
  schema.add_string("token", "",
                    "Cluster token; when empty, --head takes $OOZE_CLUSTER_TOKEN or generates "
                    "one, a joining node reads $OOZE_CLUSTER_TOKEN or /tmp/ooze/cluster/token.");
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

ConfigSchema build_status_schema() {
  ConfigSchema schema;
  schema.section("status");
  schema.add_string("address", "127.0.0.1:6380", "HEAD_IP:PORT of the head.");
  schema.add_string("token", "", "Cluster token (default: $OOZE_CLUSTER_TOKEN or the saved one).");
  return schema;
}

// Readable by its owner only, from the moment the file exists: the token grants full control of
// the cluster. Throws IoError naming the path when it cannot be written.
void save_token(const std::string& token) {
  fs::create_directories(kClusterDir);
  AtomicFile file(kClusterDir + "/token", 0600);
  file.write(token + "\n");
  file.commit();
}

bool is_wildcard(const std::string& host) { return host == "0.0.0.0" || host == "*"; }

// The address of this machine's interface on the route to `head_address` (HOST:PORT), found by
// pointing a UDP socket at it (nothing is sent): what the head's machine reaches this one at.
std::string local_address_towards(const std::string& head_address) {
  const size_t colon = head_address.rfind(':');
  const std::string host = head_address.substr(0, colon);
  const std::string port = colon == std::string::npos ? "6380" : head_address.substr(colon + 1);
  const std::string advice = ": give this node's IP with --node-ip";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int failed = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); failed != 0) {
    throw ConfigError("cannot resolve the head's host " + host + " (" + gai_strerror(failed) + ")" +
                      advice);
  }
  const int probe = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  const bool routed = probe >= 0 && connect(probe, found->ai_addr, found->ai_addrlen) == 0 &&
                      getsockname(probe, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  if (probe >= 0) close(probe);
  freeaddrinfo(found);
  char text[INET_ADDRSTRLEN] = {};
  if (!routed || inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) == nullptr) {
    throw ConfigError("no route from this machine to the head at " + head_address + advice);
  }
  return text;
}

// This machine's address as other machines see it: the interface on its default route (a UDP
// socket pointed at a public address; nothing is sent), else its first non-loopback IPv4
// interface; nullopt when it has only loopback.
std::optional<std::string> this_machine_address() {
  try {
    return local_address_towards("8.8.8.8:53");
  } catch (const ConfigError&) {
    // No default route: an isolated network still has interfaces of its own.
  }
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (const ifaddrs* entry = interfaces; entry != nullptr && !found; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    if ((entry->ifa_flags & IFF_UP) == 0 || (entry->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if (inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  freeifaddrs(interfaces);
  return found;
}

bool is_loopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost";
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

// Whether the head answers and lists node `node_id` alive.
bool head_lists_alive(actors::Client& client, const std::string& node_id) {
  try {
    const auto status = client.ask_head<actors::ClusterStatus>(
        actors::method::kStatus, std::string(), std::chrono::seconds(2));
    return std::any_of(status.nodes.begin(), status.nodes.end(),
                       [&](const actors::NodeInfo& n) { return n.node_id == node_id && n.alive; });
  } catch (const Error&) {
    return false;  // no answer
  }
}

// Runs in the foreground: the services, until a stop signal (returns 0) or, for a joining
// node, until the head is lost (returns 1).
int serve(const Config& flags, int ready_fd) {
  sigset_t signals = block_stop_signals();
  fs::create_directories(kClusterDir);
  { std::ofstream(pid_file()) << getpid() << "\n"; }
  std::string token = flags.get<std::string>("token");
  bool is_head = flags.get<bool>("head");
  // A batch script (examples/cluster/slurm.sbatch) sets one token in the environment of every
  // task before anything starts: the head takes it too.
  const char* from_environment = std::getenv("OOZE_CLUSTER_TOKEN");
  if (token.empty() && is_head && from_environment != nullptr) token = from_environment;
  if (token.empty()) token = is_head ? Security::generate_token() : find_cluster_token();
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
  std::string loopback_note;
  if (is_head) {
    // By default the head listens on every interface and names the one other machines reach,
    // so that the join command it prints works where it is pasted.
    std::string host = flags.get<std::string>("host");
    if (host.empty()) host = "0.0.0.0";
    const std::string port = std::to_string(flags.get<int64_t>("port"));
    if (node_ip.empty()) node_ip = host;
    if (is_wildcard(node_ip)) {
      const std::optional<std::string> reachable = this_machine_address();
      node_ip = reachable.value_or("127.0.0.1");
      if (!reachable) {
        loopback_note =
            "(this machine has no network address but loopback: only processes on it can "
            "join)\n";
      }
    } else if (is_loopback(node_ip)) {
      loopback_note =
          "(listening on loopback only: other machines cannot join; start the head without "
          "--host, or with --host set to this machine's IP, to let them)\n";
    }
    actors::HeadOptions options;
    options.endpoint = "tcp://" + host + ":" + port;
    options.security = security;
    options.node_timeout = std::chrono::milliseconds(flags.get<int64_t>("node_timeout_ms"));
    options.client_timeout = std::chrono::milliseconds(flags.get<int64_t>("client_timeout_ms"));
    head = std::make_unique<actors::Head>(options);
    // What the other machines join: a wildcard listens on every interface, node_ip among them.
    head_address = (is_wildcard(host) ? node_ip : host) + ":" + port;
    save_token(token);
  }
  if (node_ip.empty()) node_ip = local_address_towards(head_address);
  actors::NodeOptions node_options;
  node_options.head_endpoint = "tcp://" + head_address;
  node_options.security = security;
  node_options.address = node_ip;
  node_options.ipc_workers = false;
  node_options.resources = resources;
  node_options.session_dir = kClusterDir + "/node_" + std::to_string(getpid());
  actors::NodeAgent node(node_options);

  // A joining node watches its head (below); the head answering it is also when it has joined.
  std::unique_ptr<actors::Client> head_watch;
  if (!is_head) {
    head_watch = std::make_unique<actors::Client>(node_options.head_endpoint, security,
                                                  /*is_driver=*/false);
  }

  std::ostringstream banner;
  if (is_head) {
    banner << "ooze head listening at " << head_address << " with node " << node.node_id() << " "
           << actors::format_resources(resources) << "\n"
           << "join other machines with:\n  ooze start --address " << head_address << " --token "
           << token << "\n"
           << loopback_note << "drivers: ooze train --address " << head_address
           << " (on other machines with OOZE_CLUSTER_TOKEN=" << token << ")\n";
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
  // Until a stop signal; a joining node also ends once its head has not listed it alive for
  // the node's head timeout (the head was lost, or declared this node dead), by which time the
  // node has stopped its workers. This thread alone stops the node: it is joined only once.
  auto last_listed = std::chrono::steady_clock::now();
  bool head_lost = false;
  for (;;) {
    const timespec tick{1, 0};
    if (sigtimedwait(&signals, nullptr, &tick) >= 0) break;
    if (!head_watch) continue;
    const auto now = std::chrono::steady_clock::now();
    if (head_lists_alive(*head_watch, node.node_id())) {
      last_listed = now;
    } else if (now - last_listed > node_options.head_timeout) {
      std::cerr << "ooze node " << node.node_id() << ": the head at " << head_address
                << " has not listed this node alive for " << node_options.head_timeout.count()
                << " ms; stopping\n";
      head_lost = true;
      break;
    }
  }
  head_watch.reset();
  node.stop();
  if (head) head->stop();
  fs::remove(pid_file());
  return head_lost ? 1 : 0;
}

}  // namespace

const ConfigSchema& start_schema() {
  static const ConfigSchema schema = build_start_schema();
  return schema;
}

const ConfigSchema& status_schema() {
  static const ConfigSchema schema = build_status_schema();
  return schema;
}

const ConfigSchema& stop_schema() {
  static const ConfigSchema schema;
  return schema;
}

std::string find_cluster_token() {
  const char* from_environment = std::getenv("OOZE_CLUSTER_TOKEN");
  if (from_environment != nullptr && *from_environment != '\0') return from_environment;
  std::ifstream file(kClusterDir + "/token");
  std::string token;
  file >> token;
  return token;
}

int run_start_command(const std::vector<std::string>& args) {
  const std::optional<Config> parsed = load_config_from_command_line(start_schema(), args);
  if (!parsed) {
    std::cout << command_help("start");
    return 0;
  }
  const Config& flags = *parsed;
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
  const std::optional<Config> parsed = load_config_from_command_line(status_schema(), args);
  if (!parsed) {
    std::cout << command_help("status");
    return 0;
  }
  const Config& flags = *parsed;
  std::string token = flags.get<std::string>("token");
  if (token.empty()) token = find_cluster_token();
  if (token.empty()) throw ConfigError("no cluster token: pass --token or set OOZE_CLUSTER_TOKEN");
  actors::Client client("tcp://" + flags.get<std::string>("address"), Security::from_token(token),
                        /*is_driver=*/false);
  auto status = client.ask_head<actors::ClusterStatus>(actors::method::kStatus, std::string());
  std::cout << actors::format_status(status);
  return 0;
}

int run_stop_command(const std::vector<std::string>& args) {
  if (!load_config_from_command_line(stop_schema(), args)) {
    std::cout << command_help("stop");
    return 0;
  }
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
