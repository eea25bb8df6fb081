// fp32 to bf16 into memory the caller will not read back: how a colocated weight sync writes a
// trainer's fp32 shard into a bf16 engine's parameters.
//
//   convert_to_bfloat16(shard.data_ptr<float>(),
//                       reinterpret_cast<uint16_t*>(engine_parameter.data_ptr()), count);
#pragma once

#include <cstddef>
#include <cstdint>

namespace ooze {

// Rounds each value as LibTorch's c10::BFloat16 does (to nearest, ties to even), so the bits
// equal those of `tensor.to(at::kBFloat16)`; a NaN becomes the quiet NaN 0x7FC0. With AVX-512
// the stores stream past the cache (why: in bfloat16_conversion.cpp).
void convert_to_bfloat16(const float* source, uint16_t* destination, size_t count);

}  // namespace ooze
