#include "comm/collective_checks.h"

#include <sstream>
#include <utility>

#include "comm/comm_error.h"

namespace ooze {
namespace comm {
namespace {

const char* const kReducibleDtypes =
    "float32, float64, float16, bfloat16, int32, int64, int8, uint8";

// "float32 [4, 4]"
std::string describe(const at::Tensor& tensor) {
  std::ostringstream out;
  out << dtype_name(tensor.scalar_type()) << " " << tensor.sizes();
  return out.str();
}

}  // namespace

std::string DeviceRule::problem(const at::Tensor& tensor) const {
  const at::Device device = tensor.device();
  if (!is_cuda()) {
    if (device.is_cpu()) return "";
    return "is on " + device.str() +
           ", but the Gloo backend takes CPU tensors (move it to the CPU, or use the NCCL backend "
           "for CUDA tensors)";
  }
  const std::string here = "cuda:" + std::to_string(cuda_index_);
  if (!device.is_cuda()) {
    return "is on " + device.str() + ", but the NCCL backend needs CUDA tensors on " + here +
           " (move it there, or use the Gloo backend for CPU tensors)";
  }
  if (device.index() != cuda_index_) {
    return "is on " + device.str() + ", but this communicator uses " + here;
  }
  return "";
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    default:
      return c10::toString(dtype);
  }
}

bool is_reducible_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kInt:
    case at::kLong:
    case at::kChar:
    case at::kByte:
      return true;
    default:
      return false;
  }
}

CollectiveChecks::CollectiveChecks(std::string group, int rank, int size, DeviceRule device)
    : group_(std::move(group)), rank_(rank), size_(size), device_(device) {}

void CollectiveChecks::fail(const std::string& op, const std::string& problem) const {
  throw CommError(op + " in group '" + group_ + "' (rank " + std::to_string(rank_) + " of " +
                  std::to_string(size_) + "): " + problem);
}

void CollectiveChecks::placed(const std::string& op, const std::string& arg,
                              const at::Tensor& tensor) const {
  if (!tensor.defined()) fail(op, arg + " is an undefined tensor");
  if (tensor.layout() != at::kStrided) {
    std::ostringstream layout;
    layout << tensor.layout();
    fail(op, arg + " is a " + layout.str() +
                 " tensor; collectives take dense tensors (pass tensor.to_dense())");
  }
  std::string problem = device_.problem(tensor);
  if (!problem.empty()) fail(op, arg + " " + problem);
}

void CollectiveChecks::contiguous(const std::string& op, const std::string& arg,
                                  const at::Tensor& tensor) const {
  if (!tensor.is_contiguous()) {
    fail(op, arg + " " + describe(tensor) +
                 " is not contiguous; pass tensor.contiguous() (and copy the result back if the "
                 "operation writes into it)");
  }
}

void CollectiveChecks::same_dtype(const std::string& op, const at::Tensor& output,
                                  const at::Tensor& input) const {
  if (output.scalar_type() != input.scalar_type()) {
    fail(op, "output dtype " + dtype_name(output.scalar_type()) + " does not match input dtype " +
                 dtype_name(input.scalar_type()) + "; convert one of them");
  }
}

void CollectiveChecks::reducible(const std::string& op, const std::string& arg,
                                 const at::Tensor& tensor, ReduceOp reduce) const {
  const at::ScalarType dtype = tensor.scalar_type();
  if (!is_reducible_dtype(dtype)) {
    fail(op, arg + " has dtype " + dtype_name(dtype) + ", which reduce op " +
                 reduce_op_name(reduce) + " cannot reduce; reductions take " + kReducibleDtypes);
  }
  if (reduce == ReduceOp::AVG && !at::isFloatingType(dtype)) {
    fail(op, arg + " has dtype " + dtype_name(dtype) +
                 ", but reduce op avg needs a floating-point dtype; use sum and divide yourself");
  }
}

void CollectiveChecks::peer(const std::string& op, const std::string& role, int peer) const {
  if (peer < 0 || peer >= size_) {
    fail(op, role + " " + std::to_string(peer) + " is out of range; the group has ranks 0.." +
                 std::to_string(size_ - 1));
  }
}

void CollectiveChecks::even_split(const std::string& op, const std::string& whole_role,
                                  const at::Tensor& whole, const std::string& part_role,
                                  const at::Tensor& part) const {
  const int64_t expected = size_ * part.numel();
  if (whole.numel() != expected) {
    fail(op, whole_role + " has " + std::to_string(whole.numel()) + " elements; expected " +
                 std::to_string(size_) + " ranks x " + std::to_string(part.numel()) + " " +
                 part_role + " elements = " + std::to_string(expected));
  }
}

void CollectiveChecks::counts(const std::string& op, const std::vector<int64_t>& counts,
                              const std::string& whole_role, const at::Tensor& whole,
                              const std::string& own_role, const at::Tensor& own) const {
  if (counts.size() != static_cast<size_t>(size_)) {
    fail(op, "counts has " + std::to_string(counts.size()) + " entries, but the group has " +
                 std::to_string(size_) + " ranks; give one count per rank");
  }
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      fail(op, "counts[" + std::to_string(r) + "] is negative (" + std::to_string(counts[r]) + ")");
    }
    total += counts[r];
  }
  if (whole.numel() != total) {
    fail(op, whole_role + " has " + std::to_string(whole.numel()) +
                 " elements, but counts sum to " + std::to_string(total));
  }
  const int64_t mine = counts[static_cast<size_t>(rank_)];
  if (own.numel() != mine) {
    fail(op, own_role + " has " + std::to_string(own.numel()) + " elements, but counts[" +
                 std::to_string(rank_) + "] is " + std::to_string(mine));
  }
}

}  // namespace comm
}  // namespace ooze
