// One rank of a multi-process comm test. The test starts W of these on loopback; each forms
// the group through a TcpStore hosted by rank 0, runs one scenario, prints what went wrong and
// exits 0 (passed), 1 (a check failed) or 3 (a CommError, which some scenarios expect).
//
//   comm_worker SCENARIO RANK WORLD PORT TIMEOUT_MS
//
// SCENARIO_tcp runs SCENARIO with every operation on loopback TCP, where the plain name lets
// large operations take the same-host path (same_host_collectives.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_error.h"
#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/load_time_settings.h"

using namespace ooze::comm;
using std::chrono::milliseconds;

namespace {

int g_failures = 0;

void fail(const std::string& what) {
  std::cerr << "CHECK FAILED: " << what << std::endl;
  ++g_failures;
}

// Small integers plus quarters: every sum over <= 4 ranks is exact even in bfloat16, so the
// expected values below need no tolerance.
double value(int rank, int64_t i, at::ScalarType dtype) {
  double v = static_cast<double>(((rank * 31 + i * 17) % 17) - 8);
  if (at::isFloatingType(dtype)) v += 0.25 * static_cast<double>((rank + i) % 4);
  return v;
}

at::Tensor make_input(int rank, int64_t n, at::ScalarType dtype, int64_t shift = 0) {
  std::vector<double> data(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[static_cast<size_t>(i)] = value(rank, i + shift, dtype);
  return at::tensor(data, at::kDouble).to(dtype);
}

void expect_values(const at::Tensor& got, const std::vector<double>& want,
                   const std::string& what) {
  at::Tensor g = got.to(at::kDouble).contiguous();
  if (g.numel() != static_cast<int64_t>(want.size())) {
    fail(what + ": " + std::to_string(g.numel()) + " elements, expected " +
         std::to_string(want.size()));
    return;
  }
  const double* p = g.data_ptr<double>();
  for (size_t i = 0; i < want.size(); ++i) {
    if (p[i] != want[i]) {
      fail(what + ": element " + std::to_string(i) + " is " + std::to_string(p[i]) + ", expected " +
           std::to_string(want[i]));
      return;
    }
  }
}

double reduce_values(const std::vector<double>& xs, ReduceOp op) {
  double acc = xs[0];
  for (size_t k = 1; k < xs.size(); ++k) {
    if (op == ReduceOp::MAX)
      acc = std::max(acc, xs[k]);
    else if (op == ReduceOp::MIN)
      acc = std::min(acc, xs[k]);
    else
      acc += xs[k];
  }
  return op == ReduceOp::AVG ? acc / static_cast<double>(xs.size()) : acc;
}

std::vector<ReduceOp> ops_for(at::ScalarType dtype) {
  std::vector<ReduceOp> ops = {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN};
  if (at::isFloatingType(dtype)) ops.push_back(ReduceOp::AVG);
  return ops;
}

template <typename F>
void expect_comm_error(F&& call, const std::string& needle, const std::string& what) {
  try {
    call();
    fail(what + ": expected a CommError");
  } catch (const CommError& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      fail(what + ": error '" + e.what() + "' does not mention '" + needle + "'");
    }
  }
}

// Every op, every dtype, sizes that do not divide by W, checked against values computed here.
void run_collectives(Communicator& comm) {
  const int W = comm.size(), R = comm.rank();
  const std::vector<at::ScalarType> dtypes = {at::kFloat, at::kBFloat16, at::kHalf,
                                              at::kInt,   at::kLong,     at::kDouble};
  // From 256 KiB on a group on one host reads its peers' memory: the last two sizes take that
  // path for 4- and 8-byte types, the last for 2-byte ones too (with SCENARIO_tcp, none does).
  const std::vector<int64_t> sizes = {1, 7, 1001, 65537, 131101};
  for (auto dtype : dtypes) {
    const std::string dt = at::toString(dtype);
    for (int64_t n : sizes) {
      const std::string tag = dt + " n=" + std::to_string(n);
      for (ReduceOp op : ops_for(dtype)) {
        at::Tensor t = make_input(R, n, dtype);
        comm.all_reduce(t, op);
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> xs;
          for (int r = 0; r < W; ++r) xs.push_back(value(r, i, dtype));
          want[static_cast<size_t>(i)] = reduce_values(xs, op);
        }
        expect_values(t, want, std::string("all_reduce ") + reduce_op_name(op) + " " + tag);
      }
      {  // all_gather
        at::Tensor out = at::empty({W * n}, dtype);
        comm.all_gather(out, make_input(R, n, dtype));
        std::vector<double> want;
        for (int r = 0; r < W; ++r)
          for (int64_t i = 0; i < n; ++i) want.push_back(value(r, i, dtype));
        expect_values(out, want, "all_gather " + tag);
      }
      {  // all_gather in place: the input is the output's own slot
        at::Tensor out = at::empty({W * n}, dtype);
        at::Tensor mine = out.narrow(0, R * n, n);
        mine.copy_(make_input(R, n, dtype));
        comm.all_gather(out, mine);
        std::vector<double> want;
        for (int r = 0; r < W; ++r)
          for (int64_t i = 0; i < n; ++i) want.push_back(value(r, i, dtype));
        expect_values(out, want, "all_gather in place " + tag);
      }
      {  // all_gather_v: uneven counts, some possibly zero
        std::vector<int64_t> counts;
        for (int r = 0; r < W; ++r) counts.push_back((n + r * 5) % 7 + (r == 1 ? 0 : n / 3));
        int64_t total = 0;
        for (auto c : counts) total += c;
        at::Tensor out = at::empty({total}, dtype);
        comm.all_gather_v(out, make_input(R, counts[static_cast<size_t>(R)], dtype), counts);
        std::vector<double> want;
        for (int r = 0; r < W; ++r)
          for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i)
            want.push_back(value(r, i, dtype));
        expect_values(out, want, "all_gather_v " + tag);
      }
      for (ReduceOp op : ops_for(dtype)) {  // reduce_scatter, even and uneven
        at::Tensor out = at::empty({n}, dtype);
        comm.reduce_scatter(out, make_input(R, W * n, dtype), op);
        std::vector<double> want;
        for (int64_t i = R * n; i < (R + 1) * n; ++i) {
          std::vector<double> xs;
          for (int r = 0; r < W; ++r) xs.push_back(value(r, i, dtype));
          want.push_back(reduce_values(xs, op));
        }
        expect_values(out, want, std::string("reduce_scatter ") + reduce_op_name(op) + " " + tag);

        std::vector<int64_t> counts;
        for (int r = 0; r < W; ++r) counts.push_back((n * (r + 1)) % 5 + (r == 0 ? n : 0));
        int64_t total = 0, offset = 0;
        for (int r = 0; r < W; ++r) {
          if (r < R) offset += counts[static_cast<size_t>(r)];
          total += counts[static_cast<size_t>(r)];
        }
        at::Tensor out_v = at::empty({counts[static_cast<size_t>(R)]}, dtype);
        comm.reduce_scatter_v(out_v, make_input(R, total, dtype), counts, op);
        std::vector<double> want_v;
        for (int64_t i = offset; i < offset + counts[static_cast<size_t>(R)]; ++i) {
          std::vector<double> xs;
          for (int r = 0; r < W; ++r) xs.push_back(value(r, i, dtype));
          want_v.push_back(reduce_values(xs, op));
        }
        expect_values(out_v, want_v,
                      std::string("reduce_scatter_v ") + reduce_op_name(op) + " " + tag);
      }
      for (int root = 0; root < W; ++root) {
        at::Tensor t = make_input(R, n, dtype);
        comm.broadcast(t, root);
        std::vector<double> want;
        for (int64_t i = 0; i < n; ++i) want.push_back(value(root, i, dtype));
        expect_values(t, want, "broadcast root=" + std::to_string(root) + " " + tag);
      }
      {  // ring exchange: everyone sends right and receives from the left at once
        int right = (R + 1) % W, left = (R + W - 1) % W;
        at::Tensor incoming = at::empty({n}, dtype);
        auto recv = comm.recv_async(incoming, left, 5);
        auto send = comm.send_async(make_input(R, n, dtype), right, 5);
        send->wait();
        recv->wait();
        std::vector<double> want;
        for (int64_t i = 0; i < n; ++i) want.push_back(value(left, i, dtype));
        expect_values(incoming, want, "send/recv " + tag);
      }
    }
  }
  comm.barrier();

  // Two messages on one pair with different tags, received in the opposite order. A send may
  // complete only once its receive is posted, so both are in flight together.
  if (W >= 2 && R < 2) {
    int peer = 1 - R;
    if (R == 0) {
      auto first = comm.send_async(make_input(0, 10, at::kFloat, 100), peer, 1);
      auto second = comm.send_async(make_input(0, 20, at::kFloat, 200), peer, 2);
      first->wait();
      second->wait();
    } else {
      at::Tensor second = at::empty({20}), first = at::empty({10});
      comm.recv(second, peer, 2);
      comm.recv(first, peer, 1);
      std::vector<double> w1, w2;
      for (int64_t i = 0; i < 10; ++i) w1.push_back(value(0, i + 100, at::kFloat));
      for (int64_t i = 0; i < 20; ++i) w2.push_back(value(0, i + 200, at::kFloat));
      expect_values(first, w1, "tagged recv 1");
      expect_values(second, w2, "tagged recv 2");
    }
  }

  // Non-contiguous input is accepted (gathered from a transposed view).
  {
    at::Tensor base = make_input(R, 12, at::kFloat).view({3, 4});
    at::Tensor out = at::empty({W * 12});
    comm.all_gather(out, base.t());
    std::vector<double> want;
    for (int r = 0; r < W; ++r) {
      at::Tensor t = make_input(r, 12, at::kFloat).view({3, 4}).t().contiguous().view({-1});
      for (int64_t i = 0; i < 12; ++i) want.push_back(t[i].item<double>());
    }
    expect_values(out, want, "all_gather of a transposed view");
  }
}

// Many operations in flight at once, then repeated use of the same group.
void run_async(Communicator& comm) {
  const int W = comm.size(), R = comm.rank();
  std::vector<at::Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 16; ++k) {
    tensors.push_back(at::full({4096}, static_cast<float>(R + k)));
    works.push_back(comm.all_reduce_async(tensors.back(), ReduceOp::SUM));
  }
  at::Tensor gathered = at::empty({W * 3});
  works.push_back(comm.all_gather_async(gathered, at::full({3}, static_cast<float>(R))));
  for (auto& w : works) w->wait();
  for (auto& w : works) {
    if (!w->is_completed()) fail("is_completed() false after wait()");
  }
  for (int k = 0; k < 16; ++k) {
    double want = static_cast<double>(W * (W - 1) / 2 + W * k);
    if (tensors[static_cast<size_t>(k)].min().item<double>() != want ||
        tensors[static_cast<size_t>(k)].max().item<double>() != want) {
      fail("async all_reduce #" + std::to_string(k));
    }
  }
  for (int r = 0; r < W; ++r) {
    if (gathered[r * 3].item<double>() != r) fail("async all_gather");
  }
  for (int iter = 0; iter < 200; ++iter) {
    at::Tensor t = at::full({17}, static_cast<float>(iter * R));
    comm.all_reduce(t, ReduceOp::MAX);
    if (t[16].item<double>() != iter * (W - 1)) {
      fail("repeated all_reduce at iteration " + std::to_string(iter));
      break;
    }
  }
}

// Sub-groups: even/odd ranks, and a reversed pair whose new ranks differ from the old ones.
void run_subgroups(Communicator& comm) {
  const int W = comm.size(), R = comm.rank();
  std::vector<int> members;
  for (int r = R % 2; r < W; r += 2) members.push_back(r);
  auto group = comm.new_group(members, R % 2 == 0 ? "even" : "odd");
  if (group->size() != static_cast<int>(members.size())) fail("sub-group size");
  at::Tensor t = at::full({5}, static_cast<float>(R + 1));
  group->all_reduce(t, ReduceOp::SUM);
  double want = 0;
  for (int r : members) want += r + 1;
  if (t[0].item<double>() != want) fail("sub-group all_reduce");

  if (R == 0 || R == W - 1) {
    auto pair = comm.new_group({W - 1, 0}, "ends");
    int expected_rank = (R == W - 1) ? 0 : 1;
    if (pair->rank() != expected_rank) fail("reversed sub-group rank");
    at::Tensor x = at::full({3}, static_cast<float>(R));
    pair->broadcast(x, 0);  // new rank 0 is old rank W-1
    if (x[0].item<double>() != W - 1) fail("reversed sub-group broadcast");
    at::Tensor out = at::empty({2});
    pair->all_gather(out, at::full({1}, static_cast<float>(R)));
    if (out[0].item<double>() != W - 1 || out[1].item<double>() != 0) fail("sub-group order");
  }
  comm.barrier();
}

// Invalid calls fail at once with a message that says what was wrong.
void run_bad_arguments(Communicator& comm) {
  const int W = comm.size();
  expect_comm_error([&] { comm.all_gather(at::empty({W * 4 + 1}), at::empty({4})); }, "elements",
                    "all_gather with a wrong output size");
  expect_comm_error([&] { comm.all_reduce(at::empty({4}, at::kInt), ReduceOp::AVG); },
                    "floating-point", "integer avg");
  expect_comm_error([&] { comm.all_gather(at::empty({W * 4}, at::kInt), at::empty({4})); }, "dtype",
                    "dtype mismatch");
  expect_comm_error(
      [&] {
        comm.all_reduce(at::empty({4, 4}).t(), ReduceOp::SUM);
      },
      "contiguous", "non-contiguous output");
  expect_comm_error([&] { comm.broadcast(at::empty({4}), W); }, "root", "root out of range");
  expect_comm_error([&] { comm.reduce_scatter_v(at::empty({1}), at::empty({W}), {1}); }, "counts",
                    "counts of the wrong length");
  expect_comm_error([&] { comm.all_reduce(at::empty({4}, at::kBool)); }, "dtype", "bool sum");
  // The group still works afterwards: nothing was sent.
  at::Tensor t = at::ones({3});
  comm.all_reduce(t);
  if (t[0].item<double>() != W) fail("group unusable after rejected calls");
}

// Rank `victim` kills itself while the others are inside large all_reduces.
void run_kill_peer(Communicator& comm, int victim) {
  at::Tensor big = at::ones({8 << 20});
  if (comm.rank() == victim) {
    std::thread([] {
      std::this_thread::sleep_for(milliseconds(300));
      ::raise(SIGKILL);
    }).detach();
  }
  for (int i = 0; i < 100000; ++i) comm.all_reduce(big, ReduceOp::AVG);
}

// Rank size-1 takes part once, then stays away (stuck elsewhere) well past the timeout.
void run_hung_peer(Communicator& comm) {
  at::Tensor t = at::ones({16});
  comm.all_reduce(t);
  if (comm.rank() == comm.size() - 1) {
    std::this_thread::sleep_for(comm.timeout() + std::chrono::seconds(5));
    return;
  }
  comm.all_reduce(t);
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  if (argc != 6) {
    std::cerr << "usage: comm_worker SCENARIO RANK WORLD PORT TIMEOUT_MS\n";
    return 2;
  }
  std::string scenario = argv[1];
  SameHostPath same_host_path = SameHostPath::kWhenPossible;
  if (scenario.size() > 4 && scenario.substr(scenario.size() - 4) == "_tcp") {
    scenario.resize(scenario.size() - 4);
    same_host_path = SameHostPath::kOff;
  }
  const int rank = std::atoi(argv[2]), world = std::atoi(argv[3]), port = std::atoi(argv[4]);
  const milliseconds timeout(std::atoi(argv[5]));
  at::set_num_threads(1);
  auto start = std::chrono::steady_clock::now();
  // Declared outside the try block so that they outlive the error report below.
  std::shared_ptr<TcpStore> store;
  std::shared_ptr<Communicator> comm;
  try {
    store = std::make_shared<TcpStore>("127.0.0.1", port, rank, rank == 0, timeout);
    comm =
        make_gloo_communicator(store, rank, world, "world", timeout, "127.0.0.1", same_host_path);
    if (scenario == "collectives") {
      run_collectives(*comm);
    } else if (scenario == "async") {
      run_async(*comm);
    } else if (scenario == "subgroups") {
      run_subgroups(*comm);
    } else if (scenario == "bad_arguments") {
      run_bad_arguments(*comm);
    } else if (scenario == "kill_last") {
      run_kill_peer(*comm, world - 1);
    } else if (scenario == "kill_first") {
      run_kill_peer(*comm, 0);
    } else if (scenario == "hung_peer" || scenario == "absent_peer") {
      run_hung_peer(*comm);
    } else {
      std::cerr << "unknown scenario " << scenario << "\n";
      return 2;
    }
    // Rank 0 hosts the store: keep it up until everyone is done with it.
    comm->barrier();
  } catch (const CommError& e) {
    auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    std::cerr << "COMM ERROR after " << ms.count() << " ms: " << e.what() << std::endl;
    // Rank 0 hosts the store: linger so the other survivors can still diagnose through it.
    if (rank == 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::_Exit(3);  // do not wait for threads stuck on a dead group
  }
  if (g_failures > 0) return 1;
  std::cout << "rank " << rank << " passed" << std::endl;
  return 0;
}
