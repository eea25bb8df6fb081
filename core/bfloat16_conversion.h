// fp32 to bf16 into memory the caller will not read back: how a colocated weight sync writes a
// trainer's fp32 shard into a bf16 engine's parameters.
//
//   copy_converted(engine_parameter_slice, shard_slice);  // destination.copy_(source), faster
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

namespace ooze {

// Rounds each value as LibTorch's c10::BFloat16 does (to nearest, ties to even), so the bits
// equal those of `tensor.to(at::kBFloat16)`; a NaN becomes the quiet NaN 0x7FC0. With AVX-512
// the stores stream past the cache (why: in bfloat16_conversion.cpp).
void convert_to_bfloat16(const float* source, uint16_t* destination, size_t count);

// destination.copy_(source), the same bits; contiguous fp32 into contiguous bf16 on the CPU goes
// through convert_to_bfloat16.
void copy_converted(const at::Tensor& destination, const at::Tensor& source);

}  // namespace ooze
