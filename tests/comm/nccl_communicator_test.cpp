// The NCCL backend on real GPUs: every operation and dtype on a one-rank communicator (a real
// NCCL communicator), argument checks, timeouts, and two ranks on two threads when two GPUs
// exist. Without a GPU every test skips; without NCCL the file holds one skipped test.
//
// Device memory comes from cudaMalloc wrapped with at::for_blob, so the tests also run with a
// CPU-only LibTorch: building a CUDA tensor that way needs no CUDA kernel, and the backend only
// reads metadata and data pointers.
#include <gtest/gtest.h>

#ifdef OOZE_HAVE_NCCL

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_error.h"
#include "comm/communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/store.h"

#ifdef OOZE_TORCH_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ooze {
namespace comm {
namespace nccl_communicator_test {

using std::chrono::milliseconds;

constexpr milliseconds kTimeout{60000};
constexpr milliseconds kShortTimeout{3000};

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                             at::kInt,   at::kLong,   at::kChar, at::kByte};
const std::vector<ReduceOp> kOps = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::MIN};

// A thread-safe in-process Store; connected_ranks() reports whatever the test set.
class InMemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
    changed_.notify_all();
  }
  std::string get(const std::string& key, milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; })) {
      throw CommTimeoutError("key '" + key + "' was not set in time");
    }
    return data_[key];
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t value = (data_.count(key) ? std::stoll(data_[key]) : 0) + delta;
    data_[key] = std::to_string(value);
    changed_.notify_all();
    return value;
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& key : keys) {
      if (!data_.count(key)) return false;
    }
    return true;
  }
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    for (const auto& key : keys) get(key, timeout);
  }
  std::vector<int> connected_ranks() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return connected_;
  }
  void set_connected(std::vector<int> ranks) {
    std::lock_guard<std::mutex> lock(mutex_);
    connected_ = std::move(ranks);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
  std::vector<int> connected_;
};

int gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

#define REQUIRE_GPUS(n)                                                                  \
  do {                                                                                   \
    int found = gpu_count();                                                             \
    if (found < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA GPU(s); found " << found; \
  } while (0)

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// Host values (small integers, exact in every dtype) <-> a CUDA tensor on `device`.
at::Tensor to_device(const std::vector<double>& values, at::ScalarType dtype, int device) {
  const size_t element_size = c10::elementSize(dtype);
  std::vector<char> bytes(values.size() * element_size);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "to_device", [&] {
    auto* out = reinterpret_cast<scalar_t*>(bytes.data());
    for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<scalar_t>(values[i]);
  });
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  void* data = nullptr;
  cuda_ok(cudaMalloc(&data, std::max<size_t>(bytes.size(), 1)), "cudaMalloc");
  cuda_ok(cudaMemcpy(data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  return at::for_blob(data, {static_cast<int64_t>(values.size())})
      .deleter([](void* p) { (void)cudaFree(p); })
      .options(at::TensorOptions().dtype(dtype).device(at::kCUDA, device))
      .target_device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)))
      .make_tensor();
}

std::vector<double> to_host(const at::Tensor& tensor) {
  std::vector<char> bytes(tensor.numel() * tensor.element_size());
  cuda_ok(cudaSetDevice(tensor.device().index()), "cudaSetDevice");
  cuda_ok(cudaMemcpy(bytes.data(), tensor.data_ptr(), bytes.size(), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
  std::vector<double> values(tensor.numel());
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, tensor.scalar_type(), "to_host", [&] {
    const auto* in = reinterpret_cast<const scalar_t*>(bytes.data());
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(in[i]);
  });
  return values;
}

// Rank-dependent values in [-3, 5] (unsigned: [0, 8]) so that sums of two ranks fit int8.
std::vector<double> rank_values(int rank, int64_t n, at::ScalarType dtype) {
  const bool is_unsigned = dtype == at::kByte;
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) {
    values[i] = static_cast<double>(i % 7) + rank - (is_unsigned ? 0 : 3);
  }
  return values;
}

std::vector<double> filled(int64_t n, double value) { return std::vector<double>(n, value); }

// What `op` over the ranks' vectors gives, computed on the host.
std::vector<double> reduce_on_host(const std::vector<std::vector<double>>& inputs, ReduceOp op) {
  std::vector<double> out = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r) {
    for (size_t i = 0; i < out.size(); ++i) {
      double v = inputs[r][i];
      if (op == ReduceOp::SUM || op == ReduceOp::AVG) out[i] += v;
      if (op == ReduceOp::MAX) out[i] = std::max(out[i], v);
      if (op == ReduceOp::MIN) out[i] = std::min(out[i], v);
    }
  }
  if (op == ReduceOp::AVG) {
    for (double& v : out) v /= static_cast<double>(inputs.size());
  }
  return out;
}

std::vector<double> slice(const std::vector<double>& values, int64_t begin, int64_t count) {
  return std::vector<double>(values.begin() + begin, values.begin() + begin + count);
}

bool op_allowed(ReduceOp op, at::ScalarType dtype) {
  return op != ReduceOp::AVG || at::isFloatingType(dtype);
}

std::string describe(at::ScalarType dtype, ReduceOp op) {
  return std::string(c10::toString(dtype)) + " " + reduce_op_name(op);
}

std::shared_ptr<Communicator> make_single_rank(const std::string& name) {
  return make_nccl_communicator(std::make_shared<InMemoryStore>(), 0, 1, name, kTimeout, 0);
}

template <typename Fn>
void expect_comm_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected CommError";
  } catch (const CommError& e) {
    for (const auto& fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << "'" << fragment << "' missing from: " << e.what();
    }
  }
}

// Runs body(rank) on one thread per rank (rank r on GPU r) and reports every thread's failure.
void run_ranks(int world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        cuda_ok(cudaSetDevice(r), "cudaSetDevice");
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// ---- one rank -------------------------------------------------------------------------------

TEST(NcclCommunicator, ReportsItsShape) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("shape");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->name(), "shape");
  EXPECT_STREQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->timeout(), kTimeout);
}

TEST(NcclCommunicator, AllReduceEveryDtypeAndOp) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("all_reduce");
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
    for (at::ScalarType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        if (!op_allowed(op, dtype)) continue;
        auto input = rank_values(0, n, dtype);
        at::Tensor tensor = to_device(input, dtype, 0);
        comm->all_reduce(tensor, op);
        EXPECT_EQ(to_host(tensor), reduce_on_host({input}, op)) << describe(dtype, op);
      }
    }
  }
}

TEST(NcclCommunicator, AverageOfIntegersIsRejected) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("avg_int");
  at::Tensor tensor = to_device(filled(4, 1), at::kInt, 0);
  expect_comm_error([&] { comm->all_reduce(tensor, ReduceOp::AVG); },
                    {"avg_int", "all_reduce", "avg", "int32"});
  comm->all_reduce(tensor, ReduceOp::SUM);  // a rejected call leaves the communicator usable
}

TEST(NcclCommunicator, AllGatherEveryDtype) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("all_gather");
  for (at::ScalarType dtype : kDtypes) {
    auto input = rank_values(0, 37, dtype);
    at::Tensor in = to_device(input, dtype, 0);
    at::Tensor out = to_device(filled(37, 9), dtype, 0);
    comm->all_gather(out, in);
    EXPECT_EQ(to_host(out), input) << c10::toString(dtype);

    at::Tensor out_v = to_device(filled(37, 9), dtype, 0);
    comm->all_gather_v(out_v, in, {37});
    EXPECT_EQ(to_host(out_v), input) << c10::toString(dtype);
  }
}

TEST(NcclCommunicator, ReduceScatterEveryDtypeAndOp) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("reduce_scatter");
  for (at::ScalarType dtype : kDtypes) {
    for (ReduceOp op : kOps) {
      if (!op_allowed(op, dtype)) continue;
      auto input = rank_values(0, 29, dtype);
      at::Tensor in = to_device(input, dtype, 0);
      at::Tensor out = to_device(filled(29, 9), dtype, 0);
      comm->reduce_scatter(out, in, op);
      EXPECT_EQ(to_host(out), reduce_on_host({input}, op)) << describe(dtype, op);

      at::Tensor out_v = to_device(filled(29, 9), dtype, 0);
      comm->reduce_scatter_v(out_v, in, {29}, op);
      EXPECT_EQ(to_host(out_v), reduce_on_host({input}, op)) << describe(dtype, op);
    }
  }
}

TEST(NcclCommunicator, BroadcastAndBarrier) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("broadcast");
  for (at::ScalarType dtype : kDtypes) {
    auto input = rank_values(0, 17, dtype);
    at::Tensor tensor = to_device(input, dtype, 0);
    comm->broadcast(tensor, 0);
    EXPECT_EQ(to_host(tensor), input) << c10::toString(dtype);
  }
  comm->barrier();
  comm->barrier();
}

TEST(NcclCommunicator, EmptyTensorsAreNoOps) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("empty");
  at::Tensor empty = to_device({}, at::kFloat, 0);
  comm->all_reduce(empty);
  comm->all_gather(empty, empty);
  comm->all_gather_v(empty, empty, {0});
  comm->reduce_scatter(empty, empty);
  comm->reduce_scatter_v(empty, empty, {0});
  comm->broadcast(empty, 0);
}

TEST(NcclCommunicator, AsyncOpsCompleteInOrderAndKeepTensorsAlive) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("async");
  std::vector<WorkPtr> works;
  std::vector<at::Tensor> tensors;
  for (int i = 0; i < 8; ++i) {
    tensors.push_back(to_device(filled(4096, i), at::kFloat, 0));
    works.push_back(comm->all_reduce_async(tensors.back(), ReduceOp::SUM));
  }
  // Dropped without a wait: the communicator keeps its tensor until the op completed.
  comm->all_reduce_async(to_device(filled(4096, 1), at::kFloat, 0), ReduceOp::SUM);
  works.back()->wait();
  for (auto& work : works) {
    work->wait();
    EXPECT_TRUE(work->is_completed());
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(to_host(tensors[i]), filled(4096, i));
}

TEST(NcclCommunicator, RejectsInvalidArguments) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("checks");
  at::Tensor gpu = to_device(filled(8, 1), at::kFloat, 0);
  at::Tensor gpu_double = to_device(filled(8, 1), at::kDouble, 0);
  at::Tensor cpu = at::ones({8});

  expect_comm_error([&] { comm->all_reduce(cpu); }, {"checks", "all_reduce", "cpu"});
  // A transposed 2x4 view of device memory: not contiguous (only metadata, no kernel).
  at::Tensor strided = at::for_blob(gpu.data_ptr(), {2, 4})
                           .strides({1, 2})
                           .options(gpu.options())
                           .target_device(gpu.device())
                           .make_tensor();
  expect_comm_error([&] { comm->broadcast(strided, 0); }, {"broadcast", "contiguous"});
  at::Tensor bools = at::for_blob(gpu.data_ptr(), {8})
                         .options(gpu.options().dtype(at::kBool))
                         .target_device(gpu.device())
                         .make_tensor();
  expect_comm_error([&] { comm->all_reduce(bools); }, {"all_reduce", "dtype", "Bool"});
  at::Tensor elsewhere = at::for_blob(gpu.data_ptr(), {8})
                             .options(gpu.options().device(at::kCUDA, 7))
                             .target_device(at::Device(at::kCUDA, 7))
                             .make_tensor();
  expect_comm_error([&] { comm->all_reduce(elsewhere); }, {"cuda:7", "cuda:0"});

  expect_comm_error([&] { comm->all_gather(gpu_double, gpu); }, {"all_gather", "dtype"});
  at::Tensor small = to_device(filled(3, 0), at::kFloat, 0);
  expect_comm_error([&] { comm->all_gather(small, gpu); }, {"all_gather", "elements"});
  expect_comm_error([&] { comm->reduce_scatter(gpu, small); }, {"reduce_scatter", "elements"});
  const std::vector<int64_t> two_counts = {4, 4};
  expect_comm_error([&] { comm->all_gather_v(gpu, gpu, two_counts); },
                    {"all_gather_v", "counts has 2 entries"});
  expect_comm_error([&] { comm->all_gather_v(gpu, gpu, {7}); }, {"all_gather_v", "sum to 7"});
  expect_comm_error([&] { comm->reduce_scatter_v(small, gpu, {8}); },
                    {"reduce_scatter_v", "counts[0]"});
  expect_comm_error([&] { comm->broadcast(gpu, 1); }, {"broadcast", "root 1", "out of range"});
  expect_comm_error([&] { comm->send(gpu, 3); }, {"send", "out of range"});
  expect_comm_error([&] { comm->recv(gpu, -1); }, {"recv", "out of range"});
  expect_comm_error([&] { comm->send(gpu, 0); }, {"send", "oneself"});
  expect_comm_error([&] { comm->new_group({}, "sub"); }, {"new_group", "empty"});
  expect_comm_error([&] { comm->new_group({0, 0}, "sub"); }, {"new_group", "twice"});
  expect_comm_error([&] { comm->new_group({1}, "sub"); }, {"new_group", "out of range"});

  comm->all_reduce(gpu);  // rejected calls never reached NCCL
  EXPECT_EQ(to_host(gpu), filled(8, 1));
}

TEST(NcclCommunicator, NewGroupOfOneRank) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("parent");
  auto sub = comm->new_group({0}, "sub");
  EXPECT_EQ(sub->name(), "parent/sub");
  EXPECT_EQ(sub->size(), 1);
  at::Tensor tensor = to_device(filled(5, 3), at::kFloat, 0);
  sub->all_reduce(tensor, ReduceOp::MAX);
  comm->all_reduce(tensor, ReduceOp::SUM);
  EXPECT_EQ(to_host(tensor), filled(5, 3));
}

TEST(NcclCommunicator, MissingUniqueIdTimesOut) {
  REQUIRE_GPUS(1);
  auto store = std::make_shared<InMemoryStore>();
  store->set_connected({1});
  try {
    make_nccl_communicator(store, 1, 2, "lonely", milliseconds(300), 0);
    ADD_FAILURE() << "expected CommTimeoutError";
  } catch (const CommTimeoutError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("lonely"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0 never published"), std::string::npos) << message;
    EXPECT_NE(message.find("ranks [0]"), std::string::npos) << message;
  }
}

// Rank 0 of two initializes alone: nonblocking init must give up after the timeout.
TEST(NcclCommunicator, InitWithoutPeersTimesOut) {
  REQUIRE_GPUS(1);
  auto store = std::make_shared<InMemoryStore>();
  store->set_connected({0});
  const auto start = std::chrono::steady_clock::now();
  try {
    make_nccl_communicator(store, 0, 2, "half", kShortTimeout, 0);
    ADD_FAILURE() << "expected CommTimeoutError";
  } catch (const CommTimeoutError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("half"), std::string::npos) << message;
    EXPECT_NE(message.find("init"), std::string::npos) << message;
    EXPECT_NE(message.find("ranks [1]"), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kShortTimeout + std::chrono::seconds(30));
}

#ifdef OOZE_TORCH_HAS_CUDA
// With a CUDA LibTorch the communicator follows torch's current stream: work queued on a side
// stream before the op is seen by it, and work queued after wait() sees its result.
TEST(NcclCommunicator, FollowsTorchCurrentStream) {
  REQUIRE_GPUS(1);
  auto comm = make_single_rank("torch_stream");
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, 0);
  c10::cuda::CUDAStreamGuard guard(side);
  at::Tensor tensor = at::full({1 << 20}, 2.0f, at::TensorOptions().device(at::kCUDA, 0));
  tensor.mul_(3.0f);
  comm->all_reduce(tensor, ReduceOp::SUM);
  tensor.add_(1.0f);
  EXPECT_TRUE(at::all(tensor.cpu() == 7.0f).item<bool>());
}
#endif

// ---- two ranks on two GPUs ------------------------------------------------------------------

TEST(NcclCommunicator, TwoRanksEveryOp) {
  REQUIRE_GPUS(2);
  constexpr int kWorld = 2;
  auto store = std::make_shared<InMemoryStore>();
  run_ranks(kWorld, [&](int rank) {
    auto comm = make_nccl_communicator(store, rank, kWorld, "pair", kTimeout, rank);
    for (at::ScalarType dtype : kDtypes) {
      std::vector<std::vector<double>> inputs;
      for (int r = 0; r < kWorld; ++r) inputs.push_back(rank_values(r, 40, dtype));
      const auto& mine = inputs[rank];
      const std::string what = c10::toString(dtype);

      for (ReduceOp op : kOps) {
        if (!op_allowed(op, dtype)) continue;
        at::Tensor tensor = to_device(mine, dtype, rank);
        comm->all_reduce(tensor, op);
        EXPECT_EQ(to_host(tensor), reduce_on_host(inputs, op)) << describe(dtype, op);

        at::Tensor out = to_device(filled(20, 9), dtype, rank);
        comm->reduce_scatter(out, to_device(mine, dtype, rank), op);
        EXPECT_EQ(to_host(out), slice(reduce_on_host(inputs, op), 20 * rank, 20))
            << describe(dtype, op);

        const std::vector<int64_t> counts = {27, 13};
        const int64_t offset = rank == 0 ? 0 : counts[0];
        at::Tensor out_v = to_device(filled(counts[rank], 9), dtype, rank);
        comm->reduce_scatter_v(out_v, to_device(mine, dtype, rank), counts, op);
        EXPECT_EQ(to_host(out_v), slice(reduce_on_host(inputs, op), offset, counts[rank]))
            << describe(dtype, op);
      }

      at::Tensor gathered = to_device(filled(80, 9), dtype, rank);
      comm->all_gather(gathered, to_device(mine, dtype, rank));
      std::vector<double> expected = inputs[0];
      expected.insert(expected.end(), inputs[1].begin(), inputs[1].end());
      EXPECT_EQ(to_host(gathered), expected) << what;

      // Uneven: rank 0 contributes 3 elements, rank 1 contributes 11.
      const std::vector<int64_t> counts = {3, 11};
      at::Tensor gathered_v = to_device(filled(14, 9), dtype, rank);
      comm->all_gather_v(gathered_v, to_device(slice(mine, 0, counts[rank]), dtype, rank), counts);
      std::vector<double> expected_v = slice(inputs[0], 0, 3);
      auto tail = slice(inputs[1], 0, 11);
      expected_v.insert(expected_v.end(), tail.begin(), tail.end());
      EXPECT_EQ(to_host(gathered_v), expected_v) << what;

      at::Tensor broadcast = to_device(mine, dtype, rank);
      comm->broadcast(broadcast, 1);
      EXPECT_EQ(to_host(broadcast), inputs[1]) << what;

      // Both directions, in opposite issue orders on the two ranks.
      at::Tensor outgoing = to_device(mine, dtype, rank);
      at::Tensor incoming = to_device(filled(40, 9), dtype, rank);
      const int peer = 1 - rank;
      if (rank == 0) {
        comm->send(outgoing, peer);
        comm->recv(incoming, peer);
      } else {
        comm->recv(incoming, peer);
        comm->send(outgoing, peer);
      }
      EXPECT_EQ(to_host(incoming), inputs[peer]) << what;
    }
    comm->barrier();

    // A sub-group with the ranks reversed: parent rank 1 becomes rank 0.
    auto reversed = comm->new_group({1, 0}, "reversed");
    EXPECT_EQ(reversed->rank(), 1 - rank);
    EXPECT_EQ(reversed->name(), "pair/reversed");
    at::Tensor tensor = to_device(filled(6, rank + 1), at::kFloat, rank);
    reversed->broadcast(tensor, 0);
    EXPECT_EQ(to_host(tensor), filled(6, 2));
    comm->barrier();
  });
}

// Rank 0 runs an all_reduce that rank 1 never joins: rank 0 times out naming the operation,
// and the broken communicator refuses later operations.
TEST(NcclCommunicator, TwoRanksMissingPeerTimesOutAndBreaks) {
  REQUIRE_GPUS(2);
  auto store = std::make_shared<InMemoryStore>();
  store->set_connected({0, 1});
  std::mutex mutex;
  std::condition_variable rank0_done_cv;
  bool rank0_done = false;
  run_ranks(2, [&](int rank) {
    auto comm = make_nccl_communicator(store, rank, 2, "stall", kShortTimeout, rank);
    comm->barrier();
    if (rank == 0) {
      at::Tensor tensor = to_device(filled(16, 1), at::kFloat, 0);
      try {
        comm->all_reduce(tensor);
        ADD_FAILURE() << "expected CommTimeoutError";
      } catch (const CommTimeoutError& e) {
        std::string message = e.what();
        EXPECT_NE(message.find("stall"), std::string::npos) << message;
        EXPECT_NE(message.find("all_reduce #2"), std::string::npos) << message;
        EXPECT_NE(message.find("still connected"), std::string::npos) << message;
      }
      expect_comm_error([&] { comm->barrier(); }, {"broken", "all_reduce #2"});
      std::lock_guard<std::mutex> lock(mutex);
      rank0_done = true;
      rank0_done_cv.notify_all();
    } else {
      std::unique_lock<std::mutex> lock(mutex);
      rank0_done_cv.wait(lock, [&] { return rank0_done; });
    }
  });
}

}  // namespace nccl_communicator_test
}  // namespace comm
}  // namespace ooze

#else  // !OOZE_HAVE_NCCL

TEST(NcclCommunicator, NotBuilt) {
  GTEST_SKIP() << "ooze was built without NCCL (nccl.h or the CUDA runtime not found)";
}

#endif  // OOZE_HAVE_NCCL
