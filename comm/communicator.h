// The collective-communication interface that the trainer, weight sync and context
// parallelism share. Backends: Gloo for CPU tensors (gloo_communicator.h) and NCCL for CUDA
// tensors (nccl_communicator.h).
//
// Every operation has an asynchronous form returning a Work handle, so communication can
// overlap compute; the plain form waits for it. Operations on one communicator execute in
// the order they were issued, and every rank of the group must issue the same sequence.
// Every wait is bounded by the group's timeout: a dead or absent peer produces CommError
// naming the group, the operation and the ranks that did not arrive.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ooze {
namespace comm {

enum class ReduceOp { SUM, AVG, MAX, MIN };
const char* reduce_op_name(ReduceOp op);

// Handle of an operation in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation finished; throws CommError if it failed or timed out.
  // On CUDA, returns once the caller's current stream is ordered after the operation.
  virtual void wait() = 0;
  // True once the operation finished, successfully or not; never blocks.
  virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name, used in error messages and to namespace rendezvous keys.
  virtual const std::string& name() const = 0;
  virtual const char* backend() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // In place over `tensor` on every rank. AVG is for floating-point dtypes only.
  virtual WorkPtr all_reduce_async(const at::Tensor& tensor, ReduceOp op) = 0;
  // `output` (flat, size() * input.numel() elements) receives every rank's `input` in rank order.
  // `input` may be this rank's own slot of `output` (in place).
  virtual WorkPtr all_gather_async(const at::Tensor& output, const at::Tensor& input) = 0;
  // Uneven variant: rank r contributes counts[r] elements; output.numel() == sum(counts).
  virtual WorkPtr all_gather_v_async(const at::Tensor& output, const at::Tensor& input,
                                     const std::vector<int64_t>& counts) = 0;
  // `input` (flat, size() * output.numel() elements) is reduced over ranks; rank r keeps chunk r.
  virtual WorkPtr reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                       ReduceOp op) = 0;
  // Uneven variant: chunk r has counts[r] elements; input.numel() == sum(counts).
  virtual WorkPtr reduce_scatter_v_async(const at::Tensor& output, const at::Tensor& input,
                                         const std::vector<int64_t>& counts, ReduceOp op) = 0;
  // In place: every rank ends with root's `tensor`.
  virtual WorkPtr broadcast_async(const at::Tensor& tensor, int root) = 0;
  // Point to point. Messages between one pair of ranks with the same tag arrive in order.
  // A send may complete only once the matching receive is posted (as with NCCL), so a rank
  // that must send twice before the peer receives uses send_async for both.
  virtual WorkPtr send_async(const at::Tensor& tensor, int dst, uint32_t tag = 0) = 0;
  virtual WorkPtr recv_async(const at::Tensor& tensor, int src, uint32_t tag = 0) = 0;
  virtual WorkPtr barrier_async() = 0;

  // A communicator over `ranks` (ranks of this group; position in the list = new rank).
  // Called by the members only, each with the same list and name.
  virtual std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                                  const std::string& name) = 0;

  // Blocking forms.
  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::SUM) {
    all_reduce_async(tensor, op)->wait();
  }
  void all_gather(const at::Tensor& output, const at::Tensor& input) {
    all_gather_async(output, input)->wait();
  }
  void all_gather_v(const at::Tensor& output, const at::Tensor& input,
                    const std::vector<int64_t>& counts) {
    all_gather_v_async(output, input, counts)->wait();
  }
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                      ReduceOp op = ReduceOp::SUM) {
    reduce_scatter_async(output, input, op)->wait();
  }
  void reduce_scatter_v(const at::Tensor& output, const at::Tensor& input,
                        const std::vector<int64_t>& counts, ReduceOp op = ReduceOp::SUM) {
    reduce_scatter_v_async(output, input, counts, op)->wait();
  }
  void broadcast(const at::Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }
  void send(const at::Tensor& tensor, int dst, uint32_t tag = 0) {
    send_async(tensor, dst, tag)->wait();
  }
  void recv(const at::Tensor& tensor, int src, uint32_t tag = 0) {
    recv_async(tensor, src, tag)->wait();
  }
  void barrier() { barrier_async()->wait(); }
};

}  // namespace comm
}  // namespace ooze
