// A Communicator that counts the time its caller spends in communication, for benchmarks that
// split a step into compute and communication: it forwards everything to the wrapped one and adds
// the wall time of issuing each operation and of every wait() to a shared counter. What ran
// overlapped with compute (nobody waited for it) is not counted.
//
//   auto timed = std::make_shared<TimedCommunicator>(group);
//   ... train with `timed` ...
//   double seconds = timed->blocked_seconds();
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ooze::bench {

// Adds the wall time of every wait() to a shared nanosecond counter.
class TimedWork : public comm::Work {
 public:
  TimedWork(comm::WorkPtr inner, std::shared_ptr<std::atomic<int64_t>> blocked_ns)
      : inner_(std::move(inner)), blocked_ns_(std::move(blocked_ns)) {}
  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    inner_->wait();
    *blocked_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  comm::WorkPtr inner_;
  std::shared_ptr<std::atomic<int64_t>> blocked_ns_;
};

// A Communicator that forwards everything to `inner` and counts the time the caller spends in
// it: issuing each operation and waiting for it. What prefetching overlapped with compute is
// not counted (nobody waited for it).
class TimedCommunicator : public comm::Communicator {
 public:
  explicit TimedCommunicator(
      std::shared_ptr<comm::Communicator> inner,
      std::shared_ptr<std::atomic<int64_t>> blocked_ns = std::make_shared<std::atomic<int64_t>>(0))
      : inner_(std::move(inner)), blocked_ns_(std::move(blocked_ns)) {}

  double blocked_seconds() const { return static_cast<double>(blocked_ns_->load()) * 1e-9; }
  void reset() { *blocked_ns_ = 0; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  const char* backend() const override { return inner_->backend(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

  comm::WorkPtr all_reduce_async(const at::Tensor& tensor, comm::ReduceOp op) override {
    return timed([&] { return inner_->all_reduce_async(tensor, op); });
  }
  comm::WorkPtr all_gather_async(const at::Tensor& output, const at::Tensor& input) override {
    return timed([&] { return inner_->all_gather_async(output, input); });
  }
  comm::WorkPtr all_gather_v_async(const at::Tensor& output, const at::Tensor& input,
                                   const std::vector<int64_t>& counts) override {
    return timed([&] { return inner_->all_gather_v_async(output, input, counts); });
  }
  comm::WorkPtr reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                     comm::ReduceOp op) override {
    return timed([&] { return inner_->reduce_scatter_async(output, input, op); });
  }
  comm::WorkPtr reduce_scatter_v_async(const at::Tensor& output, const at::Tensor& input,
                                       const std::vector<int64_t>& counts,
                                       comm::ReduceOp op) override {
    return timed([&] { return inner_->reduce_scatter_v_async(output, input, counts, op); });
  }
  comm::WorkPtr broadcast_async(const at::Tensor& tensor, int root) override {
    return timed([&] { return inner_->broadcast_async(tensor, root); });
  }
  comm::WorkPtr send_async(const at::Tensor& tensor, int dst, uint32_t tag) override {
    return timed([&] { return inner_->send_async(tensor, dst, tag); });
  }
  comm::WorkPtr recv_async(const at::Tensor& tensor, int src, uint32_t tag) override {
    return timed([&] { return inner_->recv_async(tensor, src, tag); });
  }
  comm::WorkPtr barrier_async() override {
    return timed([&] { return inner_->barrier_async(); });
  }
  std::shared_ptr<comm::Communicator> new_group(const std::vector<int>& ranks,
                                                const std::string& name) override {
    return std::make_shared<TimedCommunicator>(inner_->new_group(ranks, name), blocked_ns_);
  }

 private:
  comm::WorkPtr timed(const std::function<comm::WorkPtr()>& issue) {
    const auto start = std::chrono::steady_clock::now();
    comm::WorkPtr work = issue();
    *blocked_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    return std::make_shared<TimedWork>(std::move(work), blocked_ns_);
  }

  std::shared_ptr<comm::Communicator> inner_;
  std::shared_ptr<std::atomic<int64_t>> blocked_ns_;
};

}  // namespace ooze::bench
