#include "algorithms/packed_sequences.h"

#include <string>

#include "core/error.h"

namespace ooze::algorithms {

PackedSequences::PackedSequences(const at::Tensor& cu_seqlens, int64_t num_tokens,
                                 at::Device device)
    : num_tokens_(num_tokens) {
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.numel() < 1 ||
      at::isFloatingType(cu_seqlens.scalar_type())) {
    throw Error(
        "cu_seqlens must be a 1-D integer tensor [B + 1] of sample boundaries {0, L_0, ..., T}, "
        "got " +
        (cu_seqlens.defined() ? std::string(cu_seqlens.toString()) + " of shape " +
                                    std::to_string(cu_seqlens.dim()) + "-D, " +
                                    std::to_string(cu_seqlens.numel()) + " entries"
                              : std::string("an undefined tensor")));
  }
  at::Tensor host = cu_seqlens.to(at::kCPU, at::kLong).contiguous();
  const int64_t* bounds = host.data_ptr<int64_t>();
  num_sequences_ = host.numel() - 1;
  if (bounds[0] != 0) {
    throw Error("cu_seqlens must start at 0, got " + std::to_string(bounds[0]));
  }
  for (int64_t b = 0; b < num_sequences_; ++b) {
    if (bounds[b + 1] < bounds[b]) {
      throw Error("cu_seqlens must be nondecreasing, got cu_seqlens[" + std::to_string(b) +
                  "] = " + std::to_string(bounds[b]) + " > cu_seqlens[" + std::to_string(b + 1) +
                  "] = " + std::to_string(bounds[b + 1]));
    }
  }
  if (bounds[num_sequences_] != num_tokens) {
    throw Error("cu_seqlens ends at " + std::to_string(bounds[num_sequences_]) +
                " but the per-token tensors hold " + std::to_string(num_tokens) +
                " tokens: pass the cu_seqlens of this micro-batch");
  }
  lengths_ = (host.slice(0, 1) - host.slice(0, 0, num_sequences_)).to(device);
  // The repeats-only overload: output_size must be an optional, or the call means "repeat each
  // length num_tokens times".
  sequence_index_ = at::repeat_interleave(lengths_, c10::optional<int64_t>(num_tokens));
}

at::Tensor PackedSequences::sum(const at::Tensor& per_token) const {
  // segment_reduce is several times faster than index_add on the CPU; it rejects empty data. The
  // zero sum keeps an empty micro-batch's loss in the autograd graph, so its backward still runs.
  if (num_tokens_ == 0) return at::zeros({num_sequences_}, per_token.options()) + per_token.sum();
  return at::segment_reduce(per_token, "sum", lengths_);
}

at::Tensor PackedSequences::expand(const at::Tensor& per_sequence) const {
  return per_sequence.index_select(0, sequence_index_);
}

at::Tensor PackedSequences::masked_mean(const at::Tensor& values, const at::Tensor& mask) const {
  return sum(values * mask) / at::clamp_min(sum(mask), 1.0);
}

void check_per_token(const char* where, const char* name, const at::Tensor& tensor,
                     int64_t num_tokens) {
  if (!tensor.defined()) {
    throw Error(std::string(where) + ": " + name + " is required here but was not given");
  }
  if (tensor.dim() != 1 || tensor.numel() != num_tokens ||
      !at::isFloatingType(tensor.scalar_type())) {
    throw Error(std::string(where) + ": " + name +
                " must be a 1-D floating tensor of one value per packed token (T = " +
                std::to_string(num_tokens) + "), got " + tensor.toString() + " with " +
                std::to_string(tensor.dim()) + " dims and " + std::to_string(tensor.numel()) +
                " values");
  }
}

at::Tensor to_compute_dtype(const at::Tensor& tensor) {
  if (tensor.scalar_type() == at::kHalf || tensor.scalar_type() == at::kBFloat16) {
    return tensor.to(at::kFloat);
  }
  return tensor;
}

}  // namespace ooze::algorithms
