// Throughput of the actor runtime (actors/), in the manner of Ray's microbenchmark: calls per
// second with a tiny argument (one caller to one actor, waiting for each result or pipelined;
// one caller to 4 actors) and the bandwidth of sending a float tensor of 1 MiB and 256 MiB to an
// actor method that returns a small value.
//
// The baseline of each figure, measured in the same run, is a raw ZeroMQ request/reply loop
// between this process and echo processes over ipc:// (the transport the runtime uses on one
// machine), with the same payload sizes and no framing, serialization or threads of its own:
//   sync_1to1    REQ -> ROUTER, one request at a time, 4-byte requests and replies
//   async_1to1   DEALER -> ROUTER, windows of kWindow requests, then all the replies
//   fanout_1toN  kFanout DEALERs -> kFanout echo processes (one per actor), round-robin windows
//   tensor.*     REQ -> ROUTER, the tensor's bytes as one zero-copy message, an 8-byte reply
// The rate figures take rounds of the baseline and the runtime in turn.
// ratio = runtime / raw ZeroMQ (1.0: the runtime adds nothing to the socket round trip).
//
//   bench_actors_bench            # starts its actors and echo processes itself
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "actors/runtime.h"
#include "core/error.h"
#include "core/load_time_settings.h"
#include "core/tensor_serialization.h"
#include "core/timer.h"

using Clock = std::chrono::steady_clock;

namespace {

using ooze::seconds_since;

constexpr int kWindow = 1000;          // calls in flight in the pipelined figures
constexpr int kFanout = 4;             // actors (and echo processes) of fanout_1toN
constexpr int kSyncBatch = 50;         // sync calls between two looks at the clock
constexpr int kRounds = 5;             // rate figures: median over this many rounds
constexpr double kRoundSeconds = 0.3;  // each round runs at least this long

const char* const kEchoFlag = "--zmq-echo";

// ---- the actor ------------------------------------------------------------------------------

class BenchActor {
 public:
  int echo(int value) { return value + 1; }
  // A checksum of a few elements, so the bytes must have arrived but are not all read.
  double probe(const at::Tensor& tensor) { return checksum(tensor); }

  static double checksum(const at::Tensor& tensor) {
    const float* data = tensor.data_ptr<float>();
    const int64_t n = tensor.numel();
    return static_cast<double>(data[0]) + data[n / 2] + data[n - 1];
  }
};

const auto bench_actor_class = ooze::actors::ActorClass<BenchActor>("BenchActor")
                                   .method("echo", &BenchActor::echo)
                                   .method("probe", &BenchActor::probe);

// ---- measuring ------------------------------------------------------------------------------

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

// Runs some items and returns how many.
using Batch = std::function<int64_t()>;

// Items per second of `batch`, run for at least kRoundSeconds.
double rate_of(const Batch& batch) {
  int64_t items = 0;
  const auto start = Clock::now();
  double elapsed = 0.0;
  while (elapsed < kRoundSeconds) {
    items += batch();
    elapsed = seconds_since(start);
  }
  return static_cast<double>(items) / elapsed;
}

// Medians over kRounds of the rates of the baseline and of the runtime. Their rounds take
// turns, so that both see the same machine load: on a small, shared machine the load swings
// more from second to second than the runtime's cost.
std::pair<double, double> paired_median_rates(const Batch& baseline, const Batch& runtime) {
  baseline();  // warm-up: connections, first allocations
  runtime();
  std::vector<double> baseline_rates, runtime_rates;
  for (int round = 0; round < kRounds; ++round) {
    baseline_rates.push_back(rate_of(baseline));
    runtime_rates.push_back(rate_of(runtime));
  }
  return {median(baseline_rates), median(runtime_rates)};
}

// Median seconds of `once` over `repetitions` (after one warm-up).
double median_seconds(int repetitions, const std::function<void()>& once) {
  once();
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = Clock::now();
    once();
    times.push_back(seconds_since(start));
  }
  return median(times);
}

void print_line(const std::string& bench, const char* metric, double value, const char* unit,
                double baseline) {
  std::printf(
      "{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %.3f, \"unit\": \"%s\", "
      "\"baseline\": %.3f, \"ratio\": %.4f}\n",
      bench.c_str(), metric, value, unit, baseline, value / baseline);
  std::fflush(stdout);
}

// ---- the raw ZeroMQ baseline ------------------------------------------------------------------

// The echo process: a ROUTER that answers each request with its envelope and a small reply
// (the request itself when at most 8 bytes, else its size as 8 bytes). Runs until killed.
int run_echo_peer(const std::string& endpoint) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.bind(endpoint);
  std::vector<zmq::message_t> parts;
  while (true) {
    parts.clear();
    do {
      parts.emplace_back();
      if (!socket.recv(parts.back(), zmq::recv_flags::none)) return 1;
    } while (parts.back().more());
    zmq::message_t& request = parts.back();
    uint64_t size = request.size();
    zmq::message_t reply = size <= sizeof(size) ? zmq::message_t(request.data(), request.size())
                                                : zmq::message_t(&size, sizeof(size));
    for (size_t i = 0; i + 1 < parts.size(); ++i) socket.send(parts[i], zmq::send_flags::sndmore);
    socket.send(reply, zmq::send_flags::none);
  }
}

// Echo processes (this program re-executed with kEchoFlag), one ipc endpoint each in a fresh
// temporary directory; killed and removed on destruction.
class EchoPeers {
 public:
  EchoPeers(const char* program, int count) {
    char pattern[] = "/tmp/ooze-actors-bench-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      throw ooze::IoError(std::string("cannot create a temporary directory for the baseline's "
                                      "sockets: ") +
                          std::strerror(errno));
    }
    dir_ = pattern;
    try {
      for (int i = 0; i < count; ++i) start(program, i);
    } catch (...) {
      stop();
      throw;
    }
  }
  ~EchoPeers() { stop(); }
  EchoPeers(const EchoPeers&) = delete;
  EchoPeers& operator=(const EchoPeers&) = delete;

  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  void start(const char* program, int index) {
    endpoints_.push_back("ipc://" + dir_ + "/echo" + std::to_string(index) + ".sock");
    std::fflush(stdout);  // the child must not inherit unwritten output
    pid_t pid = ::fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the benchmark
      ::execl("/proc/self/exe", program, kEchoFlag, endpoints_.back().c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid < 0) throw ooze::Error(std::string("fork failed: ") + std::strerror(errno));
    pids_.push_back(pid);
  }

  void stop() {
    for (pid_t pid : pids_) ::kill(pid, SIGTERM);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
    pids_.clear();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string dir_;
  std::vector<std::string> endpoints_;
  std::vector<pid_t> pids_;
};

zmq::socket_t connect_socket(zmq::context_t& context, zmq::socket_type type,
                             const std::string& endpoint) {
  zmq::socket_t socket(context, type);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(endpoint);
  return socket;
}

// Receives one reply (all its parts) into `reply`; the last part is kept.
void receive_reply(zmq::socket_t& socket, zmq::message_t& reply) {
  do {
    if (!socket.recv(reply, zmq::recv_flags::none)) throw ooze::Error("baseline recv failed");
  } while (reply.more());
}

int reply_as_int(const zmq::message_t& reply) {
  int value = 0;
  if (reply.size() != sizeof(value)) throw ooze::Error("baseline echo returned a wrong reply");
  std::memcpy(&value, reply.data(), sizeof(value));
  return value;
}

Batch raw_sync_batch(zmq::context_t& context, const std::string& endpoint) {
  auto socket =
      std::make_shared<zmq::socket_t>(connect_socket(context, zmq::socket_type::req, endpoint));
  return [socket, value = 0]() mutable {
    zmq::message_t reply;
    for (int i = 0; i < kSyncBatch; ++i) {
      ++value;
      socket->send(zmq::message_t(&value, sizeof(value)), zmq::send_flags::none);
      receive_reply(*socket, reply);
      if (reply_as_int(reply) != value) throw ooze::Error("baseline echo returned a wrong value");
    }
    return int64_t{kSyncBatch};
  };
}

// Windows of kWindow requests spread round-robin over one DEALER per endpoint.
Batch raw_pipelined_batch(zmq::context_t& context, const std::vector<std::string>& endpoints) {
  auto sockets = std::make_shared<std::vector<zmq::socket_t>>();
  for (const std::string& endpoint : endpoints) {
    sockets->push_back(connect_socket(context, zmq::socket_type::dealer, endpoint));
  }
  return [sockets] {
    const int n = static_cast<int>(sockets->size());
    zmq::message_t reply;
    for (int i = 0; i < kWindow; ++i) {
      (*sockets)[i % n].send(zmq::message_t(&i, sizeof(i)), zmq::send_flags::none);
    }
    for (int i = 0; i < kWindow; ++i) {
      receive_reply((*sockets)[i % n], reply);  // each socket's replies come back in order
      if (reply_as_int(reply) != i) throw ooze::Error("baseline echo returned a wrong value");
    }
    return int64_t{kWindow};
  };
}

double raw_message_seconds(zmq::context_t& context, const std::string& endpoint,
                           const at::Tensor& tensor, int repetitions) {
  zmq::socket_t socket = connect_socket(context, zmq::socket_type::req, endpoint);
  const uint64_t nbytes = tensor.numel() * sizeof(float);
  zmq::message_t reply;
  return median_seconds(repetitions, [&] {
    // Zero-copy: ZeroMQ reads the tensor's memory; the reply comes after it was all sent.
    zmq::message_t request(
        tensor.data_ptr<float>(), nbytes, [](void*, void*) {}, nullptr);
    socket.send(request, zmq::send_flags::none);
    receive_reply(socket, reply);
    uint64_t echoed = 0;
    if (reply.size() == sizeof(echoed)) std::memcpy(&echoed, reply.data(), sizeof(echoed));
    if (echoed != nbytes) throw ooze::Error("baseline echo returned a wrong size");
  });
}

// ---- the runtime's figures ------------------------------------------------------------------

using BenchHandle = ooze::actors::ActorHandle<BenchActor>;

Batch actor_sync_batch(const BenchHandle& actor) {
  return [actor, value = 0]() mutable {
    for (int i = 0; i < kSyncBatch; ++i) {
      ++value;
      if (actor.call(&BenchActor::echo, value).get() != value + 1) {
        throw ooze::Error("BenchActor.echo returned a wrong value");
      }
    }
    return int64_t{kSyncBatch};
  };
}

// Windows of kWindow calls spread round-robin over `actors`, then all the results.
Batch actor_pipelined_batch(const std::vector<BenchHandle>& actors) {
  return [actors] {
    const int n = static_cast<int>(actors.size());
    std::vector<ooze::actors::Future<int>> futures;
    futures.reserve(kWindow);
    for (int i = 0; i < kWindow; ++i) futures.push_back(actors[i % n].call(&BenchActor::echo, i));
    std::vector<int> results = ooze::actors::get_all(std::move(futures));
    for (int i = 0; i < kWindow; ++i) {
      if (results[i] != i + 1) throw ooze::Error("BenchActor.echo returned a wrong value");
    }
    return int64_t{kWindow};
  };
}

void print_paired_rates(const std::string& bench, const Batch& baseline, const Batch& runtime) {
  const auto [baseline_rate, runtime_rate] = paired_median_rates(baseline, runtime);
  print_line(bench, "throughput", runtime_rate, "calls/s", baseline_rate);
}

double actor_tensor_seconds(const BenchHandle& actor, const at::Tensor& tensor, int repetitions) {
  const double expected = BenchActor::checksum(tensor);
  return median_seconds(repetitions, [&] {
    if (actor.call(&BenchActor::probe, tensor).get() != expected) {
      throw ooze::Error("BenchActor.probe saw different tensor bytes than were sent");
    }
  });
}

int run_benchmarks(const char* program) {
  EchoPeers peers(program, kFanout);
  zmq::context_t context(1);

  ooze::actors::RuntimeOptions options;
  options.resources = {{"CPU", 2.0 * kFanout}};  // room for every actor on a small machine
  ooze::actors::init(options);
  std::vector<BenchHandle> actors;
  for (int i = 0; i < kFanout; ++i) actors.push_back(ooze::actors::spawn<BenchActor>({}));
  for (const BenchHandle& actor : actors) actor.wait_ready();

  // Each figure right after its baseline, so both see the same machine load.
  const std::vector<std::string>& endpoints = peers.endpoints();
  print_paired_rates("actors.call.sync_1to1", raw_sync_batch(context, endpoints[0]),
                     actor_sync_batch(actors[0]));
  print_paired_rates("actors.call.async_1to1", raw_pipelined_batch(context, {endpoints[0]}),
                     actor_pipelined_batch({actors[0]}));
  print_paired_rates("actors.call.fanout_1to" + std::to_string(kFanout),
                     raw_pipelined_batch(context, endpoints), actor_pipelined_batch(actors));

  for (int64_t mib : {1, 256}) {
    const int repetitions = mib <= 1 ? 100 : 5;
    const int64_t bytes = mib << 20;
    at::Tensor tensor = at::rand({bytes / static_cast<int64_t>(sizeof(float))});
    const double raw_seconds = raw_message_seconds(context, endpoints[0], tensor, repetitions);
    const double actor_seconds = actor_tensor_seconds(actors[0], tensor, repetitions);
    print_line("actors.tensor." + std::to_string(mib) + "MiB", "bandwidth",
               static_cast<double>(bytes) / actor_seconds / 1e9, "GB/s",
               static_cast<double>(bytes) / raw_seconds / 1e9);
  }
  ooze::actors::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  ooze::actors::run_worker_if_requested();    // an actor's process serves here and never returns
  if (argc == 3 && std::string(argv[1]) == kEchoFlag) return run_echo_peer(argv[2]);

  ::setenv("OMP_NUM_THREADS", "1", 1);
  at::set_num_threads(1);
  try {
    return run_benchmarks(argv[0]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_actors_bench failed: %s\n", error.what());
    ooze::actors::shutdown();
    return 1;
  }
}
