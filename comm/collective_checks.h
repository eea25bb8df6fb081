// The argument rules every Communicator backend applies before it issues an operation, so that a
// bad call fails at once, in the caller's thread, before anything reaches a peer, with the same
// message whatever the backend. Each failure is a CommError of the form
//   "<operation> in group '<group>' (rank <r> of <n>): <argument> <what is wrong; what to do>".
//
// The backends differ in one rule, where tensors must live (DeviceRule), and in which arguments
// they require contiguous (Gloo copies non-contiguous inputs; NCCL takes none). Rules a single
// backend adds (NCCL's dtype table, no send to oneself) go through fail() for the same form.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ooze {
namespace comm {

// Where a backend's tensors must live: CPU memory (Gloo) or one CUDA device (NCCL).
class DeviceRule {
 public:
  static DeviceRule cpu() { return DeviceRule(-1); }
  static DeviceRule cuda(int device_index) { return DeviceRule(device_index); }

  bool is_cuda() const { return cuda_index_ >= 0; }
  int cuda_index() const { return cuda_index_; }
  // Empty when `tensor` (a defined tensor) lives where the rule wants it; otherwise what is wrong
  // with it and what to do, as a phrase that follows the argument's name.
  std::string problem(const at::Tensor& tensor) const;

 private:
  explicit DeviceRule(int cuda_index) : cuda_index_(cuda_index) {}
  int cuda_index_;
};

// "float32", "bfloat16", "int64", ... (NCCL's names) for the dtypes collectives carry; torch's
// name ("Bool", "ComplexFloat") for the others.
std::string dtype_name(at::ScalarType dtype);

// The dtypes both backends reduce: float32, float64, float16, bfloat16, int32, int64, int8, uint8.
bool is_reducible_dtype(at::ScalarType dtype);

class CollectiveChecks {
 public:
  // `rank` of `size` in the group called `group`; tensors must satisfy `device`.
  CollectiveChecks(std::string group, int rank, int size, DeviceRule device);

  // Throws CommError "<op> in group '<group>' (rank r of n): <problem>".
  [[noreturn]] void fail(const std::string& op, const std::string& problem) const;

  // `tensor` is defined, dense (strided) and where the device rule wants it.
  void placed(const std::string& op, const std::string& arg, const at::Tensor& tensor) const;
  // `tensor` is contiguous: backends hand raw pointers to the transport.
  void contiguous(const std::string& op, const std::string& arg, const at::Tensor& tensor) const;
  // `output` and `input` have one dtype.
  void same_dtype(const std::string& op, const at::Tensor& output, const at::Tensor& input) const;
  // `tensor`'s dtype can be reduced with `reduce`: a reducible dtype, floating-point for avg.
  void reducible(const std::string& op, const std::string& arg, const at::Tensor& tensor,
                 ReduceOp reduce) const;
  // `peer` (a root, source or destination, named `role`) is a rank of the group.
  void peer(const std::string& op, const std::string& role, int peer) const;
  // Even variants: `whole` has size() times the elements of `part` (rank r's chunk).
  void even_split(const std::string& op, const std::string& whole_role, const at::Tensor& whole,
                  const std::string& part_role, const at::Tensor& part) const;
  // Uneven variants: counts[r] elements belong to rank r, so counts has one non-negative entry
  // per rank, they add up to `whole`'s elements and counts[rank] is `own`'s.
  void counts(const std::string& op, const std::vector<int64_t>& counts,
              const std::string& whole_role, const at::Tensor& whole, const std::string& own_role,
              const at::Tensor& own) const;

  const std::string& group() const { return group_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const DeviceRule& device() const { return device_; }

 private:
  std::string group_;
  int rank_;
  int size_;
  DeviceRule device_;
};

}  // namespace comm
}  // namespace ooze
