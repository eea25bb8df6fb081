// Element-wise reductions used by the CPU backend: Gloo calls them while combining chunks, and
// the ring reduce-scatter calls them directly. One kernel per (dtype, op).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>

#include "comm/communicator.h"

namespace ooze {
namespace comm {

// out[i] = a[i] (op) b[i] for n elements; `out` may alias `a` or `b`.
using ReduceKernel = void (*)(void* out, const void* a, const void* b, size_t n);

// AVG reduces as SUM (the caller divides once at the end). Throws CommError for dtypes the
// CPU backend does not reduce.
ReduceKernel reduce_kernel(at::ScalarType dtype, ReduceOp op);

}  // namespace comm
}  // namespace ooze
