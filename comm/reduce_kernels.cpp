#include "comm/reduce_kernels.h"

#include <string>

#include "comm/comm_error.h"

namespace ooze {
namespace comm {
namespace {

// Half and BFloat16 arithmetic goes through float and rounds on assignment, as NCCL does.
template <typename T>
void sum_kernel(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

template <typename T>
void max_kernel(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = (y[i] > x[i]) ? y[i] : x[i];
}

template <typename T>
void min_kernel(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = (y[i] < x[i]) ? y[i] : x[i];
}

template <typename T>
ReduceKernel kernel_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return &sum_kernel<T>;
    case ReduceOp::MAX:
      return &max_kernel<T>;
    case ReduceOp::MIN:
      return &min_kernel<T>;
  }
  return nullptr;
}

}  // namespace

ReduceKernel reduce_kernel(at::ScalarType dtype, ReduceOp op) {
  switch (dtype) {
    case at::kFloat:
      return kernel_for<float>(op);
    case at::kDouble:
      return kernel_for<double>(op);
    case at::kHalf:
      return kernel_for<at::Half>(op);
    case at::kBFloat16:
      return kernel_for<at::BFloat16>(op);
    case at::kInt:
      return kernel_for<int32_t>(op);
    case at::kLong:
      return kernel_for<int64_t>(op);
    case at::kChar:
      return kernel_for<int8_t>(op);
    case at::kByte:
      return kernel_for<uint8_t>(op);
    default:
      throw CommError(std::string("cannot reduce tensors of dtype ") + at::toString(dtype) +
                      ": supported are float32, float64, float16, bfloat16, int8, uint8, int32, "
                      "int64");
  }
}

}  // namespace comm
}  // namespace ooze
