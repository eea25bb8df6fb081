// Bandwidth of all_gather, reduce_scatter, all_reduce and broadcast between 2 real processes of
// the CPU backend, at 1, 64 and 256 MiB, then of broadcast from one rank to 2 others (3
// processes) at 64 and 256 MiB, the shape of weight sync to several rollout engines. Three
// times:
//   comm.same_host.*          a group on one host, ordinary tensors: every rank reads its peers'
//                             memory through the kernel (comm/same_host_collectives.h);
//   comm.same_host_segment.*  the same group with every tensor in an unnamed shared memory
//                             segment (core/shared_memory_segment.h), which peers map and copy
//                             from as from their own memory;
//   comm.gloo.*               every operation on Gloo's loopback TCP, as ranks on different
//                             hosts would.
// The baseline is a single-process memcpy of the same bytes, measured in the same run: the
// physical bound of this machine's memory system.
//
// Bandwidth = bytes of the full buffer (gathered output, scattered input, reduced or broadcast
// tensor) divided by the time of one operation (the slowest rank's, median of the repetitions).
//
//   bench_comm_bandwidth            # starts the ranks itself (every path, about 30 s)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/load_time_settings.h"
#include "core/shared_memory_segment.h"

using namespace ooze::comm;
using Clock = std::chrono::steady_clock;

namespace {

// Every collective runs on 2 ranks; broadcast also on 3, where the root has 2 receivers.
constexpr int kPairWorld = 2;
const std::vector<int64_t> kPairSizesMiB = {1, 64, 256};
constexpr int kFanOutWorld = 3;
const std::vector<int64_t> kFanOutSizesMiB = {64, 256};

int repetitions(int64_t mib) { return mib <= 1 ? 50 : (mib <= 64 ? 8 : 4); }

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

// Median seconds of `op` on the slowest rank (each repetition starts from a barrier).
double time_op(Communicator& comm, int reps, const std::function<void()>& op) {
  op();  // warm-up: connections, page faults
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    auto start = Clock::now();
    op();
    at::Tensor t =
        at::full({1}, std::chrono::duration<double>(Clock::now() - start).count(), at::kDouble);
    comm.all_reduce(t, ReduceOp::MAX);
    times.push_back(t.item<double>());
  }
  return median(times);
}

double memcpy_seconds(int64_t bytes, int reps) {
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes), 0);
  std::memcpy(dst.data(), src.data(), src.size());
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(times);
}

void print_line(const char* path, const std::string& op, int world, int64_t mib, double seconds,
                double baseline_seconds) {
  const double bytes = static_cast<double>(mib) * (1 << 20);
  const double value = bytes / seconds / 1e9, baseline = bytes / baseline_seconds / 1e9;
  std::printf(
      "{\"bench\": \"comm.%s.%s.%dranks.%lldMiB\", \"metric\": \"bandwidth\", \"value\": %.3f, "
      "\"unit\": \"GB/s\", \"baseline\": %.3f, \"ratio\": %.4f}\n",
      path, op.c_str(), world, static_cast<long long>(mib), value, baseline, value / baseline);
  std::fflush(stdout);
}

// How a group's ranks move bytes, and where their tensors live.
struct Path {
  const char* name;
  SameHostPath same_host_path;
  bool in_segments;
};
const std::vector<Path> kPaths = {{"same_host", SameHostPath::kWhenPossible, false},
                                  {"same_host_segment", SameHostPath::kWhenPossible, true},
                                  {"gloo", SameHostPath::kOff, false}};

int run_rank(int rank, int world, int port, const Path& path) {
  at::set_num_threads(1);
  auto store = std::make_shared<TcpStore>("127.0.0.1", port, rank, false, std::chrono::seconds(60));
  auto comm = make_gloo_communicator(store, rank, world, "bench", std::chrono::seconds(120),
                                     "127.0.0.1", path.same_host_path);
  auto ones = [&](int64_t numel) {
    if (!path.in_segments) return at::ones({numel});
    return ooze::empty_for_same_host_peers(numel * 4).view(at::kFloat).fill_(1);
  };

  const bool all_ops = world == kPairWorld;
  for (int64_t mib : all_ops ? kPairSizesMiB : kFanOutSizesMiB) {
    const int64_t n = mib * (1 << 20) / 4;  // float32 elements in the full buffer
    const int reps = repetitions(mib);
    // Rank 0 measures the baseline while the others wait, so they do not compete for memory.
    double baseline = rank == 0 ? memcpy_seconds(n * 4, reps) : 0.0;
    comm->barrier();

    at::Tensor full = ones(n), part = ones(n / world);
    if (all_ops) {
      double gather = time_op(*comm, reps, [&] { comm->all_gather(full, part); });
      double scatter = time_op(*comm, reps, [&] { comm->reduce_scatter(part, full); });
      double reduce = time_op(*comm, reps, [&] { comm->all_reduce(full); });
      if (rank == 0) {
        print_line(path.name, "all_gather", world, mib, gather, baseline);
        print_line(path.name, "reduce_scatter", world, mib, scatter, baseline);
        print_line(path.name, "all_reduce", world, mib, reduce, baseline);
      }
    }
    double bcast = time_op(*comm, reps, [&] { comm->broadcast(full, 0); });
    if (rank == 0) print_line(path.name, "broadcast", world, mib, bcast, baseline);
  }
  comm->barrier();
  return 0;
}

// Runs `world` ranks, each this program with --rank (bench_support.h: around a store served here).
bool run_group(int world, const Path& path) {
  try {
    ooze::bench::run_bench_ranks(
        world,
        [&](int rank, int port) {
          return std::vector<std::string>{"/proc/self/exe",     "--rank",
                                          std::to_string(rank), std::to_string(world),
                                          std::to_string(port), path.name};
        },
        "the " + std::to_string(world) + "-rank group");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  if (argc == 6 && std::string(argv[1]) == "--rank") {
    for (const Path& path : kPaths) {
      if (std::string(argv[5]) == path.name) {
        return run_rank(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), path);
      }
    }
    return 2;
  }
  bool ok = true;
  for (const Path& path : kPaths) {
    ok = run_group(kPairWorld, path) && ok;
    ok = run_group(kFanOutWorld, path) && ok;
  }
  return ok ? 0 : 1;
}
