#include "actors/node_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "actors/errors.h"
#include "actors/protocol.h"
#include "actors/shared_memory.h"
#include "actors/wire.h"
#include "core/logging.h"

extern char** environ;

namespace ooze::actors {
namespace {

using Clock = std::chrono::steady_clock;

// One worker process and the two pipes it writes its output into.
struct Worker {
  std::string actor_id;
  std::string owner_id;
  std::string prefix;  // "(TrainActor rank=1 pid=1234)"
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_partial, err_partial;  // an unfinished last line
  std::ofstream out_log, err_log;
  std::string last_err_line;
  bool kill_requested = false;
  std::optional<std::chrono::steady_clock::time_point> stopped_since;  // seen in state T since
  std::string killed_because;  // why the agent killed it, when it did on its own
};

// Whether `pid` is stopped by a signal: state T in /proc/PID/stat (after the parenthesised
// command name, which may itself hold spaces or parentheses).
bool stopped_by_signal(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t end_of_name = line.rfind(')');
  return end_of_name != std::string::npos && end_of_name + 2 < line.size() &&
         line[end_of_name + 2] == 'T';
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int signal = WTERMSIG(status);
    const char* name = sigabbrev_np(signal);
    return "killed by signal " + std::to_string(signal) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended with status " + std::to_string(status);
}

// A worker leads a process group of its own: the processes it started (a tool, a server) are
// in it and go with it, rather than outliving the actor. The pid itself is killed too, in case
// the worker left its group.
void kill_worker_processes(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
}

std::string sanitize(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return out;
}

}  // namespace

ResourceSet detect_node_resources() {
  ResourceSet resources;
  resources["CPU"] = std::max(1u, std::thread::hardware_concurrency());
  int gpus = 0;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string list = visible;
    if (!list.empty()) gpus = 1 + static_cast<int>(std::count(list.begin(), list.end(), ','));
  } else {
    while (std::filesystem::exists("/dev/nvidia" + std::to_string(gpus))) ++gpus;
  }
  if (gpus > 0) resources["GPU"] = gpus;
  return resources;
}

class NodeAgent::Loop {
 public:
  Loop(NodeOptions options)
      : options_(std::move(options)),
        head_(connect_socket(zmq::socket_type::dealer, options_.head_endpoint, options_.security,
                             kMaxControlPartBytes, options_.node_id)) {
    std::filesystem::create_directories(options_.session_dir + "/logs");
    std::filesystem::create_directories(options_.session_dir + "/sockets");
    RegisterNode request{options_.node_id, options_.address, options_.resources,
                         static_cast<int32_t>(getpid())};
    request_head(method::kRegisterNode, to_wire(request));
  }

  ~Loop() { kill_all(); }

  void run(const std::atomic<bool>& stopping) {
    auto last_heartbeat = Clock::now();
    auto last_stop_check = Clock::now();
    last_head_reply_ = Clock::now();
    while (!stopping.load()) {
      std::vector<zmq::pollitem_t> items{{head_.handle(), 0, ZMQ_POLLIN, 0}};
      std::vector<std::pair<Worker*, bool>> pipes;  // (worker, is stderr)
      for (auto& [actor_id, worker] : workers_) {
        if (worker.out_fd >= 0) {
          items.push_back({nullptr, worker.out_fd, ZMQ_POLLIN, 0});
          pipes.push_back({&worker, false});
        }
        if (worker.err_fd >= 0) {
          items.push_back({nullptr, worker.err_fd, ZMQ_POLLIN, 0});
          pipes.push_back({&worker, true});
        }
      }
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(20));
      for (size_t i = 1; i < items.size(); ++i) {
        if (items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))
          read_output(*pipes[i - 1].first, pipes[i - 1].second);
      }
      while (true) {
        std::string rejected;
        auto message = receive_message(head_, nullptr, &rejected);
        if (!message) {
          if (rejected.empty()) break;
          OOZE_LOG(WARN) << "node dropped a malformed message from the head: " << rejected;
          continue;
        }
        handle(*message);
      }
      reap();
      auto now = Clock::now();
      if (now - last_stop_check > std::chrono::milliseconds(200)) {
        last_stop_check = now;
        kill_stopped_workers(now);
      }
      if (now - last_heartbeat > options_.heartbeat_interval) {
        last_heartbeat = now;
        request_head(method::kHeartbeat, "");
      }
      if (now - last_head_reply_ > options_.head_timeout) {
        OOZE_LOG(ERROR) << "node " << options_.node_id << ": the head at " << options_.head_endpoint
                        << " has not answered for " << options_.head_timeout.count()
                        << " ms; stopping its workers";
        return;
      }
    }
  }

 private:
  void request_head(const char* method, std::string body) {
    Message message;
    message.header.kind = MessageKind::kRequest;
    message.header.id = ++next_request_id_;
    message.header.method = method;
    message.body = std::move(body);
    send_message(head_, std::move(message));
  }

  void handle(Message& message) {
    if (message.header.kind == MessageKind::kReply) {
      last_head_reply_ = Clock::now();
      return;
    }
    if (message.header.kind != MessageKind::kEvent) return;
    try {
      if (message.header.method == method::kStartWorker) {
        StartWorker start;
        from_wire(message.body, start);
        start_worker(start);
      } else if (message.header.method == method::kKillWorker) {
        WorkerEvent kill;
        from_wire(message.body, kill);
        auto worker = workers_.find(kill.actor_id);
        if (worker != workers_.end()) {
          worker->second.kill_requested = true;
          kill_worker_processes(worker->second.pid);
        }
      }
    } catch (const std::exception& error) {
      OOZE_LOG(WARN) << "node could not handle " << message.header.method << ": " << error.what();
    }
  }

  void start_worker(const StartWorker& start) {
    const ActorSpec& spec = start.spec;
    std::map<std::string, std::string> env;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string text = *entry;
      auto equals = text.find('=');
      if (equals != std::string::npos) env[text.substr(0, equals)] = text.substr(equals + 1);
    }
    double cpus = spec.resources.count("CPU") ? spec.resources.at("CPU") : 1.0;
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, static_cast<int>(cpus)));
    for (const auto& [key, value] : spec.env) env[key] = value;
    std::string gpu_list;
    for (int gpu : start.gpu_ids) gpu_list += (gpu_list.empty() ? "" : ",") + std::to_string(gpu);
    if (!start.gpu_ids.empty()) {
      if (spec.all_gpus_visible) {
        env["OOZE_DEVICE_INDEX"] = std::to_string(start.gpu_ids.front());
      } else {
        env["CUDA_VISIBLE_DEVICES"] = gpu_list;
        env["OOZE_DEVICE_INDEX"] = "0";
      }
    }
    env["OOZE_WORKER_ACTOR_ID"] = spec.actor_id;
    env["OOZE_HEAD_ADDRESS"] = start.head_address;
    env["OOZE_NODE_ID"] = options_.node_id;
    env["OOZE_NODE_ADDRESS"] = options_.address;  // where collective peers reach this node
    env["OOZE_SESSION_DIR"] = options_.session_dir;
    env["OOZE_RESTARTS"] = std::to_string(start.restarts);
    env["OOZE_WORKER_BIND"] = options_.ipc_workers
                                  ? "ipc://" + options_.session_dir + "/sockets/" + spec.actor_id +
                                        "-" + std::to_string(start.restarts) + ".sock"
                                  : "tcp://" + options_.address + ":0";
    if (options_.security.enabled)
      env["OOZE_CLUSTER_TOKEN"] = options_.security.token;
    else
      env.erase("OOZE_CLUSTER_TOKEN");

    // Everything the child needs is built before fork: after it only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (std::string& entry : env_strings) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::string executable = spec.executable;
    std::vector<char*> argv{executable.data(), nullptr};
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      report_exit(spec.actor_id, 0, std::string("cannot create pipes: ") + std::strerror(errno));
      return;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with this thread (the node's loop)
      if (getppid() != parent) _exit(127);
      sigset_t none;  // a blocked mask survives exec: the worker starts with none blocked
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      setpgid(0, 0);
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      syscall(SYS_close_range, 3u, ~0u, 0u);
      execve(argv[0], argv.data(), envp.data());
      const char message[] = "ooze: cannot execute the worker program\n";
      ssize_t ignored = write(STDERR_FILENO, message, sizeof(message) - 1);
      (void)ignored;
      _exit(127);
    }
    // The child's group is made on both sides of the fork, so that it exists whichever runs
    // first (a kill of the group right after this must reach the child).
    if (pid > 0) setpgid(pid, pid);
    close(out_pipe[1]);
    close(err_pipe[1]);
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    if (pid < 0) {
      close(out_pipe[0]);
      close(err_pipe[0]);
      report_exit(spec.actor_id, 0, std::string("fork failed: ") + std::strerror(errno));
      return;
    }
    Worker& worker = workers_[spec.actor_id];
    worker = Worker{};
    worker.actor_id = spec.actor_id;
    worker.owner_id = spec.owner_id;
    worker.pid = pid;
    worker.out_fd = out_pipe[0];
    worker.err_fd = err_pipe[0];
    worker.prefix = "(" + spec.label + " pid=" + std::to_string(pid) + ")";
    std::string base = options_.session_dir + "/logs/" + sanitize(spec.label) + "-" +
                       spec.actor_id + "-" + std::to_string(pid);
    worker.out_log.open(base + ".out");
    worker.err_log.open(base + ".err");
    WorkerEvent started{spec.actor_id, static_cast<int32_t>(pid), "", ""};
    request_head(method::kWorkerStarted, to_wire(started));
  }

  // Reads what the worker wrote (the pipes are non-blocking); false when nothing was there.
  bool read_output(Worker& worker, bool is_stderr) {
    int& fd = is_stderr ? worker.err_fd : worker.out_fd;
    if (fd < 0) return false;
    char buffer[65536];
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    if (n <= 0) {
      close(fd);
      fd = -1;
      return false;
    }
    std::string& partial = is_stderr ? worker.err_partial : worker.out_partial;
    (is_stderr ? worker.err_log : worker.out_log).write(buffer, n);
    (is_stderr ? worker.err_log : worker.out_log).flush();
    partial.append(buffer, n);
    LogLines lines{worker.actor_id, worker.owner_id, worker.prefix, {}, is_stderr};
    size_t start = 0;
    for (size_t newline; (newline = partial.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      lines.lines.push_back(partial.substr(start, newline - start));
    }
    partial.erase(0, start);
    if (lines.lines.empty()) return true;
    if (is_stderr) worker.last_err_line = lines.lines.back();
    request_head(method::kWorkerLog, to_wire(lines));
    return true;
  }

  void reap() {
    for (auto it = workers_.begin(); it != workers_.end();) {
      Worker& worker = it->second;
      siginfo_t exited{};
      if (waitid(P_PID, worker.pid, &exited, WEXITED | WNOHANG | WNOWAIT) != 0 ||
          exited.si_pid != worker.pid) {
        ++it;
        continue;
      }
      // Not yet reaped, the worker still holds its pid and its group's id: what it started dies
      // now, before either number can be reused.
      ::kill(-worker.pid, SIGKILL);
      int status = 0;
      waitpid(worker.pid, &status, 0);
      // Take what is left in the pipes so the last lines (the reason, often) are not lost.
      // (A grandchild may still hold them open: read what is there, do not wait.)
      while (read_output(worker, false)) {
      }
      while (read_output(worker, true)) {
      }
      std::string reason = worker.kill_requested            ? kKilledOnRequest
                           : !worker.killed_because.empty() ? worker.killed_because
                                                            : describe_exit(status);
      if (!worker.kill_requested && !worker.last_err_line.empty()) {
        reason += "; last stderr line: " + worker.last_err_line;
      }
      report_exit(worker.actor_id, worker.pid, reason);
      remove_shared_segments_of(worker.pid);  // tensors it sent that nobody received
      it = workers_.erase(it);
    }
  }

  // SIGKILLs the workers that have been stopped by a signal for stopped_worker_timeout; reap()
  // then reports them dead with the reason.
  void kill_stopped_workers(Clock::time_point now) {
    for (auto& [actor_id, worker] : workers_) {
      if (!worker.killed_because.empty() || worker.kill_requested) continue;
      if (!stopped_by_signal(worker.pid)) {
        worker.stopped_since.reset();  // never stopped, or continued (SIGCONT) in time
        continue;
      }
      if (!worker.stopped_since) worker.stopped_since = now;
      const auto stopped =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - *worker.stopped_since);
      if (stopped < options_.stopped_worker_timeout) continue;
      worker.killed_because = "stopped by a signal for " + std::to_string(stopped.count()) +
                              " ms; killed by its node, since a stopped worker holds every "
                              "collective its peers wait in";
      OOZE_LOG(WARN) << worker.prefix << " " << worker.killed_because;
      kill_worker_processes(worker.pid);
    }
  }

  void report_exit(const std::string& actor_id, pid_t pid, const std::string& reason) {
    WorkerEvent exited{actor_id, static_cast<int32_t>(pid), "", reason};
    request_head(method::kWorkerExited, to_wire(exited));
  }

  void kill_all() {
    for (auto& [actor_id, worker] : workers_) kill_worker_processes(worker.pid);
    for (auto& [actor_id, worker] : workers_) {
      int status = 0;
      waitpid(worker.pid, &status, 0);
      if (worker.out_fd >= 0) close(worker.out_fd);
      if (worker.err_fd >= 0) close(worker.err_fd);
    }
    workers_.clear();
  }

  NodeOptions options_;
  zmq::socket_t head_;
  uint64_t next_request_id_ = 0;
  Clock::time_point last_head_reply_;
  std::map<std::string, Worker> workers_;
};

NodeAgent::NodeAgent(NodeOptions options) {
  if (options.node_id.empty()) options.node_id = random_id();
  node_id_ = options.node_id;
  // The loop and the workers it forks live on one thread: PR_SET_PDEATHSIG follows the thread.
  std::promise<void> constructed;
  auto ready = constructed.get_future();
  std::exception_ptr failure;
  thread_ = std::thread([this, options = std::move(options), &constructed, &failure]() mutable {
    try {
      loop_ = std::make_unique<Loop>(std::move(options));
    } catch (...) {
      failure = std::current_exception();
      constructed.set_value();
      return;
    }
    constructed.set_value();
    loop_->run(stopping_);
    loop_.reset();  // kills the workers, on this thread
  });
  ready.wait();
  if (failure) {
    thread_.join();
    std::rethrow_exception(failure);
  }
}

NodeAgent::~NodeAgent() { stop(); }

void NodeAgent::wait() {
  if (thread_.joinable()) thread_.join();
}

void NodeAgent::stop() {
  stopping_ = true;
  wait();
}

}  // namespace ooze::actors
