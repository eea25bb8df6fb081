// y = x Wᵀ (+ b) for a few rows of x, as an engine's decode step of a few sequences has: each
// weight row is read once from memory and multiplied with every input row while it is in cache.
//
// Why not OpenBLAS's gemm: it first copies the weight into its panel layout, for every product.
// At a few rows that copy costs more than the arithmetic: a decode step of 16 sequences on the
// Qwen3-0.6B shape spent 41% of its samples in the copy (sgemm_incopy) against 33% in the
// kernel, and two threads decoded only 1.1x faster than one. With this product the same step ran
// at 36.3 tokens/s against 28.3 (2 threads, bench_llama_cpp_bench --ooze-only --batches 16).
//
//   if (few_rows_linear_applies(x, weight, bias)) y = few_rows_linear(x, weight, bias);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ooze::models {

// The most rows taken here. Measured at 16; at 64 gemm's copy is shared by enough rows that the
// engine already decodes 3-5x faster than llama.cpp, and the two were not compared there.
constexpr int64_t kFewRowsLinearMaxRows = 32;

// x: [rows, in] with 2 <= rows <= kFewRowsLinearMaxRows, weight [out, in] and bias [out] (or
// undefined), contiguous fp32 on a CPU with AVX-512, under InferenceMode (an engine's step:
// nothing needs a gradient, and a trainer's products keep OpenBLAS's order of summation).
bool few_rows_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// [rows, out]; bias: [out] fp32 or undefined. Each output sums its products in 16 lanes, then
// across them: not OpenBLAS's order, so results can differ from gemm's in the last bits.
at::Tensor few_rows_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ooze::models
