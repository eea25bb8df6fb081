// The node agent: one per machine. Registers the machine's resources with the head, starts one
// worker process per actor the head places here (fork + exec of the actor's program, with
// CUDA_VISIBLE_DEVICES, rank variables and the runtime's own variables), saves each worker's
// stdout/stderr under the session directory and streams its lines to the owning driver, watches
// the workers and reports every exit (code or signal) to the head, which decides restarts.
//
// Workers die with their node agent (PR_SET_PDEATHSIG), and the agent stops them all when the
// head has been silent for head_timeout: a lost head leaves no orphans. A worker stopped by a
// signal (SIGSTOP, SIGTSTP: state T) for stopped_worker_timeout is killed and reported dead,
// because a stopped rank or engine keeps its sockets open and would hold every collective it is
// part of until that collective's own timeout; killed, its peers' operations fail at once and the
// fault-tolerance path takes over. (A debugger's stop is a trace stop, state t, and is left alone.)
// Each worker leads a process group, which the agent kills when it kills or reaps the worker, so
// that what a worker started goes with it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "actors/resources.h"
#include "actors/transport.h"

namespace ooze::actors {

struct NodeOptions {
  std::string head_endpoint;
  Security security;
  std::string node_id;      // empty: a random one
  std::string address;      // host workers listen on (tcp) — "127.0.0.1" on one machine
  bool ipc_workers = true;  // workers listen on ipc:// sockets in the session directory
  ResourceSet resources;
  std::string session_dir;  // logs/ and sockets/ go here
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds head_timeout{10000};
  std::chrono::milliseconds stopped_worker_timeout{5000};
};

// What this machine has: {"CPU": cores, "GPU": devices} (GPUs from CUDA_VISIBLE_DEVICES or
// /dev/nvidiaN).
ResourceSet detect_node_resources();

class NodeAgent {
 public:
  // Connects to the head and starts the loop thread; registration happens in the background.
  explicit NodeAgent(NodeOptions options);
  ~NodeAgent();  // kills every worker and waits for them
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  const std::string& node_id() const { return node_id_; }
  // Blocks until the loop ends: stop(), or the head was lost. wait() and stop() join the loop
  // thread: call them from the thread that owns the agent.
  void wait();
  void stop();

 private:
  class Loop;
  std::string node_id_;
  std::unique_ptr<Loop> loop_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ooze::actors
