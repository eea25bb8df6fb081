#include "actors/runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "actors/actor_group.h"
#include "actors/head.h"
#include "actors/node_agent.h"
#include "actors/placement_group.h"
#include "actors/shared_memory.h"
#include "actors/worker.h"
#include "core/logging.h"

namespace ooze::actors {
namespace {

// The runtime of this process: a driver's (maybe with an embedded head and node) or a
// worker's (just the client).
struct ProcessRuntime {
  std::string session_dir;
  std::string head_endpoint;
  std::string worker_executable;
  std::unique_ptr<Head> head;
  std::unique_ptr<NodeAgent> node;
  std::unique_ptr<Client> client;
  bool is_driver = false;
};

std::mutex runtime_mutex;
std::unique_ptr<ProcessRuntime> runtime;
// One shutdown at a time: a stop signal's thread may race the main thread's own shutdown.
std::mutex shutdown_mutex;

ProcessRuntime& current() {
  if (!runtime) {
    throw RuntimeError("the actor runtime is not started: call ooze::actors::init() first");
  }
  return *runtime;
}

std::string this_program() {
  std::error_code error;
  auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw RuntimeError("cannot find this program's path: " + error.message());
  return path.string();
}

std::string new_session_dir() {
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  const std::string base =
      "/tmp/ooze/session_" + std::string(stamp) + "_" + std::to_string(getpid());
  std::filesystem::create_directories("/tmp/ooze");
  chmod("/tmp/ooze", 01777);
  // A driver that starts the runtime again within the second (a job restarted after a failure)
  // gets a directory of its own, so that one runtime's logs and sockets are not the other's.
  std::string dir = base;
  for (int n = 2; !std::filesystem::create_directory(dir); ++n) {
    dir = base + "_" + std::to_string(n);
  }
  chmod(dir.c_str(), 0700);  // the ipc:// sockets inside are reachable by this user only
  return dir;
}

void print_log_lines(const LogLines& lines) {
  static std::mutex print_mutex;
  std::lock_guard<std::mutex> lock(print_mutex);
  FILE* stream = lines.is_stderr ? stderr : stdout;
  for (const std::string& line : lines.lines) {
    std::fprintf(stream, "%s %s\n", lines.prefix.c_str(), line.c_str());
  }
  std::fflush(stream);
}

}  // namespace

void init(RuntimeOptions options) {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (runtime) throw RuntimeError("ooze::actors::init() was called twice");
  auto state = std::make_unique<ProcessRuntime>();
  state->is_driver = true;
  state->worker_executable =
      options.worker_executable.empty() ? this_program() : options.worker_executable;
  state->session_dir = options.session_dir.empty() ? new_session_dir() : options.session_dir;
  std::filesystem::create_directories(state->session_dir + "/sockets");
  std::string head_endpoint;
  Security security;
  if (options.address.empty()) {
    HeadOptions head;
    head.endpoint = "ipc://" + state->session_dir + "/sockets/head.sock";
    head.node_timeout = options.node_timeout;
    head.client_timeout = options.client_timeout;
    state->head = std::make_unique<Head>(head);
    head_endpoint = state->head->endpoint();
    NodeOptions node;
    node.head_endpoint = head_endpoint;
    node.address = "127.0.0.1";
    node.ipc_workers = true;
    node.resources = options.resources.empty() ? detect_node_resources() : options.resources;
    node.session_dir = state->session_dir;
    state->node = std::make_unique<NodeAgent>(node);
    enable_shared_memory(true);  // every peer is on this machine
  } else {
    std::string token = options.token;
    if (token.empty() && std::getenv("OOZE_CLUSTER_TOKEN") != nullptr) {
      token = std::getenv("OOZE_CLUSTER_TOKEN");
    }
    if (token.empty()) {
      throw ConfigError("joining the cluster at " + options.address +
                        " needs its token (printed by `ooze start --head`): set "
                        "OOZE_CLUSTER_TOKEN or RuntimeOptions::token");
    }
    security = Security::from_token(token);
    head_endpoint = "tcp://" + options.address;
  }
  OOZE_LOG(INFO) << "actor runtime session " << state->session_dir << " (every worker's log in "
                 << state->session_dir << "/logs)";
  state->head_endpoint = head_endpoint;
  state->client = std::make_unique<Client>(head_endpoint, security, /*is_driver=*/true, "",
                                           options.connect_timeout);
  if (options.log_to_driver) state->client->on_log(print_log_lines);
  // The embedded node registers over its own socket: wait until the head lists it, so that a
  // first spawn cannot reach the head before the node and find the cluster empty.
  if (state->node) {
    const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
    for (;;) {
      const ClusterStatus status =
          state->client->ask_head<ClusterStatus>(method::kStatus, std::string());
      const bool listed =
          std::any_of(status.nodes.begin(), status.nodes.end(),
                      [&](const NodeInfo& n) { return n.node_id == state->node->node_id(); });
      if (listed) break;
      if (std::chrono::steady_clock::now() > deadline) {
        throw RuntimeError("the embedded node did not register with the head within " +
                           std::to_string(options.connect_timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  runtime = std::move(state);
}

namespace {

std::unique_ptr<ProcessRuntime> take_runtime() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  return std::move(runtime);
}

// What every shutdown does to the cluster: the driver's actors released at the head, the
// embedded node's workers killed and reaped, this process's shared memory removed.
void release_cluster_resources(ProcessRuntime& state) {
  if (state.is_driver) {
    try {
      state.client->request_head(method::kShutdown, "", std::chrono::seconds(5));
    } catch (const Error& error) {
      OOZE_LOG(WARN) << "could not release this driver's actors: " << error.what();
    }
  }
  state.node.reset();  // kills every worker it still has and waits for them
  remove_shared_segments_of(getpid());
  std::error_code ignored;  // the logs stay (as Ray's sessions do); the sockets are dead
  if (state.is_driver) std::filesystem::remove_all(state.session_dir + "/sockets", ignored);
}

}  // namespace

void shutdown() {
  std::lock_guard<std::mutex> one_at_a_time(shutdown_mutex);
  std::unique_ptr<ProcessRuntime> state = take_runtime();
  if (!state) return;
  release_cluster_resources(*state);
  state->client.reset();
  state->head.reset();
}

void shutdown_before_exit() {
  std::lock_guard<std::mutex> one_at_a_time(shutdown_mutex);
  std::unique_ptr<ProcessRuntime> state = take_runtime();
  if (!state) return;
  release_cluster_resources(*state);
  state.release();  // on purpose: other threads may still hold the client; the process ends
}

std::vector<ActorInfo> dead_actors(std::chrono::milliseconds settle) {
  const auto deadline = std::chrono::steady_clock::now() + settle;
  for (;;) {
    std::vector<ActorInfo> dead;
    {
      std::lock_guard<std::mutex> lock(runtime_mutex);
      if (!runtime || !runtime->client) return dead;
      for (ActorInfo& info : runtime->client->tracked_actors()) {
        if (info.state == ActorState::kDead && info.death_reason.rfind(kKilledOnRequest, 0) != 0) {
          dead.push_back(std::move(info));
        }
      }
    }
    if (!dead.empty() || std::chrono::steady_clock::now() >= deadline) return dead;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  return runtime != nullptr;
}

void run_worker_if_requested() {
  if (!started_as_worker()) return;
  int code = 1;
  try {
    code = serve_actor_from_environment();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ooze worker failed: %s\n", error.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);  // threads of the runtime are still running: no static destructors
}

const std::string& session_dir() { return current().session_dir; }
const std::string& head_endpoint() { return current().head_endpoint; }

std::string node_address() {
  const char* address = std::getenv("OOZE_NODE_ADDRESS");
  return address != nullptr && *address != '\0' ? address : "127.0.0.1";
}

namespace detail {

void adopt_worker_client(std::unique_ptr<Client> client, const std::string& head_endpoint,
                         const std::string& session_dir) {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  runtime = std::make_unique<ProcessRuntime>();
  runtime->head_endpoint = head_endpoint;
  runtime->client = std::move(client);
  runtime->session_dir = session_dir;
  runtime->worker_executable = this_program();
}

Client& client() { return *current().client; }

ActorInfo newest_known(const ActorInfo& info) {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (!runtime || !runtime->client) return info;
  try {
    return runtime->client->actor_info(info.actor_id);
  } catch (const RuntimeError&) {
    return info;  // not tracked here
  }
}

void track_if_running(const ActorInfo& info) {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (runtime && runtime->client) runtime->client->track(info);
}

ActorInfo spawn_actor(const std::string& class_name, const ActorOptions& options,
                      std::string constructor_arguments) {
  ProcessRuntime& state = current();
  if (options.max_concurrency == 0) throw ConfigError("max_concurrency must be at least 1");
  if (options.max_restarts < 0) throw ConfigError("max_restarts must not be negative");
  ActorSpec spec;
  spec.class_name = class_name;
  spec.name = options.name;
  spec.label = options.label.empty() ? class_name : options.label;
  spec.constructor_args = std::move(constructor_arguments);
  spec.resources = options.resources;
  spec.placement_group_id = options.placement_group_id;
  spec.bundle_index = options.bundle_index;
  spec.max_restarts = options.max_restarts;
  spec.max_concurrency = options.max_concurrency;
  spec.env = options.env;
  spec.executable = state.worker_executable;
  spec.all_gpus_visible = options.all_gpus_visible;
  ActorInfo info = state.client->ask_head<ActorInfo>(method::kCreateActor, spec);
  state.client->track(info);
  return info;
}

ActorInfo find_actor(const std::string& name) {
  ActorInfo info = client().ask_head<ActorInfo>(method::kGetActor, name);
  client().track(info);
  return info;
}

std::vector<ActorOptions> group_member_options(const std::string& class_name, int size,
                                               const ActorGroupOptions& options) {
  if (size <= 0) throw ConfigError("an actor group needs at least one actor");
  std::vector<BundleInfo> bundles;
  if (options.placement_group != nullptr) {
    if (!options.placement_group->is_ready()) {
      throw PlacementError("call ready() on the placement group before spawning a group in it");
    }
    bundles = options.placement_group->bundles();
    if (static_cast<int>(bundles.size()) < size) {
      throw PlacementError("an actor group of " + std::to_string(size) +
                           " needs as many bundles; "
                           "the placement group has " +
                           std::to_string(bundles.size()));
    }
  }
  std::vector<ActorOptions> members;
  for (int rank = 0; rank < size; ++rank) {
    ActorOptions member = options.actor;
    member.label = (options.actor.label.empty() ? class_name : options.actor.label) +
                   " rank=" + std::to_string(rank);
    if (!options.actor.name.empty()) member.name = options.actor.name + "-" + std::to_string(rank);
    int local_rank = rank, local_size = size;
    if (!bundles.empty()) {
      member.placement_group_id = options.placement_group->id();
      member.bundle_index = bundles[rank].index;
      local_rank = 0;
      local_size = 0;
      for (int other = 0; other < size; ++other) {
        if (bundles[other].node_id != bundles[rank].node_id) continue;
        if (other < rank) ++local_rank;
        ++local_size;
      }
    }
    member.env["RANK"] = std::to_string(rank);
    member.env["WORLD_SIZE"] = std::to_string(size);
    member.env["LOCAL_RANK"] = std::to_string(local_rank);
    member.env["LOCAL_WORLD_SIZE"] = std::to_string(local_size);
    if (!options.group_name.empty()) member.env["OOZE_GROUP"] = options.group_name;
    members.push_back(std::move(member));
  }
  return members;
}

}  // namespace detail

void kill_actor(const std::string& actor_id, bool allow_restart) {
  detail::client().request_head(method::kKillActor, to_wire(KillRequest{actor_id, allow_restart}));
}

void kv_put(const std::string& key, const std::string& value) {
  detail::client().request_head(method::kKvPut, to_wire(KeyValue{key, value}));
}

std::string kv_get(const std::string& key, std::chrono::milliseconds timeout) {
  WaitRequest request{key, timeout.count()};
  return detail::client()
      .ask_head<KeyValue>(method::kKvGet, request, timeout + std::chrono::seconds(5))
      .value;
}

int64_t kv_add(const std::string& key, int64_t delta) {
  return detail::client().ask_head<int64_t>(method::kKvAdd, KvAdd{key, delta});
}

std::vector<std::string> kv_wait(const std::vector<std::string>& keys,
                                 std::chrono::milliseconds timeout) {
  // The head clamps waits to a day; the clamp here also keeps the reply's deadline finite.
  timeout = std::clamp<std::chrono::milliseconds>(timeout, std::chrono::milliseconds(0),
                                                  std::chrono::hours(24));
  KvWait request{keys, timeout.count()};
  return detail::client().ask_head<std::vector<std::string>>(method::kKvWait, request,
                                                             timeout + std::chrono::seconds(5));
}

ClusterStatus cluster_status() {
  return detail::client().ask_head<ClusterStatus>(method::kStatus, std::string());
}

PlacementGroup PlacementGroup::create(const std::vector<ResourceSet>& bundles,
                                      const std::string& strategy, const std::string& name) {
  parse_placement_strategy(strategy);  // a ConfigError here names the valid strategies
  PlacementGroupSpec spec{name, bundles, strategy, ""};
  return PlacementGroup(
      detail::client().ask_head<PlacementGroupInfo>(method::kCreatePlacementGroup, spec));
}

void PlacementGroup::ready(std::chrono::milliseconds timeout) {
  if (is_ready()) return;
  WaitRequest request{info_.id, timeout.count()};
  try {
    info_ = detail::client().ask_head<PlacementGroupInfo>(method::kWaitPlacementGroup, request,
                                                          timeout + std::chrono::seconds(5));
  } catch (const GetTimeoutError& error) {
    throw PlacementError(std::string("placement group not ready: ") + error.what());
  }
  if (info_.state == PlacementGroupState::kRemoved) {
    throw PlacementError("placement group " + info_.id + " was removed");
  }
}

void PlacementGroup::remove() {
  detail::client().request_head(method::kRemovePlacementGroup, to_wire(info_.id));
  info_.state = PlacementGroupState::kRemoved;
}

}  // namespace ooze::actors
