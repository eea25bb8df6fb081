#include "core/tensor_serialization.h"

#include <ATen/ATen.h>

#include <limits>
#include <string>

#include "core/error.h"

namespace ooze::detail {
namespace {

// Wire codes are ours, not c10::ScalarType's numbering, so the format does not depend on the
// LibTorch version. Never renumber; append.
struct WireDtype {
  uint8_t code;
  at::ScalarType dtype;
};
constexpr WireDtype kTensorWireCodes[] = {
    {1, at::kFloat}, {2, at::kDouble}, {3, at::kHalf}, {4, at::kBFloat16}, {5, at::kChar},
    {6, at::kShort}, {7, at::kInt},    {8, at::kLong}, {9, at::kByte},     {10, at::kBool},
};

// LibTorch's own limit on tensor dimensions.
constexpr uint32_t kMaxRank = 64;

}  // namespace

at::Tensor prepare_tensor_for_save(const at::Tensor& tensor, uint8_t* code) {
  if (!tensor.device().is_cpu()) {
    throw Error("cannot serialize a tensor on " + tensor.device().str() +
                ": only CPU tensors travel through cereal archives; move it with .cpu() first");
  }
  if (tensor.layout() != at::kStrided) {
    throw Error(
        "cannot serialize a tensor with a non-strided layout (sparse or MKL-DNN): "
        "convert it with .to_dense() first");
  }
  for (const auto& entry : kTensorWireCodes) {
    if (entry.dtype == tensor.scalar_type()) {
      *code = entry.code;
      return tensor.contiguous();
    }
  }
  throw Error(std::string("cannot serialize a tensor of dtype ") +
              at::toString(tensor.scalar_type()) +
              ": supported dtypes are float32/64, float16, bfloat16, int8/16/32/64, uint8, bool");
}

void check_tensor_wire_code(uint8_t code) {
  for (const auto& entry : kTensorWireCodes) {
    if (entry.code == code) return;
  }
  throw FormatError("tensor in archive has unknown dtype code " + std::to_string(code) +
                    " (known: 0-10); the archive is corrupt or from a newer ooze");
}

void check_tensor_rank(uint32_t rank) {
  if (rank > kMaxRank) {
    throw FormatError("tensor in archive has " + std::to_string(rank) + " dimensions (at most " +
                      std::to_string(kMaxRank) + "); the archive is corrupt");
  }
}

namespace {

at::ScalarType checked_loaded_dtype(uint8_t code, const std::vector<int64_t>& sizes,
                                    uint64_t nbytes) {
  at::ScalarType dtype = at::kFloat;
  for (const auto& entry : kTensorWireCodes) {
    if (entry.code == code) dtype = entry.dtype;
  }
  std::string shape;
  for (int64_t size : sizes) shape += (shape.empty() ? "" : ", ") + std::to_string(size);
  shape = "[" + shape + "]";

  // Expected bytes = numel * element size, computed without overflow.
  const uint64_t limit = std::numeric_limits<uint64_t>::max();
  uint64_t expected = at::elementSize(dtype);
  bool overflow = false;
  for (int64_t size : sizes) {
    if (size < 0) throw FormatError("tensor in archive has a negative size in shape " + shape);
  }
  for (int64_t size : sizes) {
    uint64_t factor = static_cast<uint64_t>(size);
    if (factor == 0) {
      expected = 0;
      overflow = false;
      break;
    }
    if (expected > limit / factor) overflow = true;
    expected *= factor;
  }
  if (overflow || expected != nbytes) {
    throw FormatError("tensor in archive has shape " + shape + " of " + at::toString(dtype) +
                      (overflow ? " (too large)" : " (" + std::to_string(expected) + " bytes)") +
                      " but carries " + std::to_string(nbytes) + " bytes; the archive is corrupt");
  }
  return dtype;
}

}  // namespace

at::Tensor allocate_loaded_tensor(uint8_t code, const std::vector<int64_t>& sizes,
                                  uint64_t nbytes) {
  at::ScalarType dtype = checked_loaded_dtype(code, sizes, nbytes);
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(at::kCPU));
}

at::Tensor tensor_over_bytes(uint8_t code, const std::vector<int64_t>& sizes, uint64_t nbytes,
                             void* data, std::shared_ptr<void> owner) {
  at::ScalarType dtype = checked_loaded_dtype(code, sizes, nbytes);
  return at::from_blob(
      data, sizes, [owner = std::move(owner)](void*) mutable { owner.reset(); },
      at::TensorOptions().dtype(dtype).device(at::kCPU));
}

}  // namespace ooze::detail
