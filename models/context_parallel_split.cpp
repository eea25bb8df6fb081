#include "models/context_parallel_split.h"

#include <ATen/ATen.h>

#include <string>

#include "core/error.h"

namespace ooze::models {
namespace {

at::Tensor long_tensor(const std::vector<int64_t>& values) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong));
}

// values.size(0) must be `expected`; `what` names the call for the message.
void check_leading_size(const at::Tensor& values, int64_t expected, const char* what,
                        const char* meaning) {
  if (!values.defined() || values.dim() < 1 || values.size(0) != expected) {
    throw Error(std::string("ContextParallelSplit::") + what + ": expected a tensor of " +
                std::to_string(expected) + " rows (" + meaning + "), got " +
                (values.defined() ? "shape " + c10::str(values.sizes()) : "an undefined tensor"));
  }
}

}  // namespace

at::Tensor ContextParallelSplit::local_cu_seqlens() const {
  return long_tensor(local_offsets).to(at::kInt);
}

at::Tensor ContextParallelSplit::shard(const at::Tensor& values, double padding_value) const {
  check_leading_size(values, num_tokens(), "shard", "one per token of the full micro-batch");
  const at::Tensor index = token_index.clamp_min(0).to(values.device());
  at::Tensor local = values.index_select(0, index);
  std::vector<int64_t> mask_shape(static_cast<size_t>(values.dim()), 1);
  mask_shape[0] = num_local_tokens();
  return local.masked_fill(padding_mask.to(values.device()).view(mask_shape), padding_value);
}

at::Tensor ContextParallelSplit::unshard(const at::Tensor& gathered) const {
  check_leading_size(gathered, cp_size * num_local_tokens(), "unshard",
                     "every rank's local tokens, in rank order");
  return gathered.index_select(0, gather_index.to(gathered.device()));
}

ContextParallelSplit split_for_context_parallel(const std::vector<int64_t>& offsets,
                                                int64_t cp_size, int64_t cp_rank) {
  if (cp_size < 1) {
    throw Error("context parallel size must be at least 1, got " + std::to_string(cp_size));
  }
  if (cp_rank < 0 || cp_rank >= cp_size) {
    throw Error("context parallel rank " + std::to_string(cp_rank) + " is outside [0, " +
                std::to_string(cp_size) + ")");
  }
  if (offsets.size() < 2 || offsets.front() != 0) {
    throw Error(
        "context parallel split: sequence offsets must start at 0 and have at least 2 "
        "entries (cu_seqlens of a micro-batch)");
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      throw Error("context parallel split: sequence offsets must be non-decreasing, but offset " +
                  std::to_string(i) + " = " + std::to_string(offsets[i]) + " < " +
                  std::to_string(offsets[i - 1]));
    }
  }

  ContextParallelSplit split;
  split.cp_size = cp_size;
  split.cp_rank = cp_rank;
  split.offsets = offsets;
  const int64_t num_sequences = static_cast<int64_t>(offsets.size()) - 1;
  const int64_t num_chunks = 2 * cp_size;
  std::vector<int64_t> chunk(static_cast<size_t>(num_sequences));
  split.local_offsets.assign(1, 0);
  for (int64_t s = 0; s < num_sequences; ++s) {
    const int64_t length = offsets[s + 1] - offsets[s];
    chunk[s] = (length + num_chunks - 1) / num_chunks;
    split.local_offsets.push_back(split.local_offsets.back() + 2 * chunk[s]);
  }
  const int64_t local_tokens = split.local_offsets.back();

  std::vector<int64_t> token_index, positions;
  std::vector<uint8_t> padding;
  token_index.reserve(static_cast<size_t>(local_tokens));
  positions.reserve(static_cast<size_t>(local_tokens));
  padding.reserve(static_cast<size_t>(local_tokens));
  for (int64_t s = 0; s < num_sequences; ++s) {
    const int64_t length = offsets[s + 1] - offsets[s];
    for (int64_t which : {cp_rank, num_chunks - 1 - cp_rank}) {
      for (int64_t j = 0; j < chunk[s]; ++j) {
        const int64_t position = which * chunk[s] + j;
        const bool is_padding = position >= length;
        token_index.push_back(is_padding ? -1 : offsets[s] + position);
        positions.push_back(position);
        padding.push_back(is_padding ? 1 : 0);
      }
    }
  }
  split.token_index = long_tensor(token_index);
  split.positions = long_tensor(positions);
  split.padding_mask = at::tensor(padding, at::TensorOptions().dtype(at::kByte)).to(at::kBool);

  std::vector<int64_t> gather_index;
  gather_index.reserve(static_cast<size_t>(offsets.back()));
  for (int64_t s = 0; s < num_sequences; ++s) {
    for (int64_t position = 0; position < offsets[s + 1] - offsets[s]; ++position) {
      const int64_t which = position / chunk[s];
      const bool first_half = which < cp_size;
      const int64_t owner = first_half ? which : num_chunks - 1 - which;
      const int64_t slot = (first_half ? 0 : chunk[s]) + position - which * chunk[s];
      gather_index.push_back(owner * local_tokens + split.local_offsets[s] + slot);
    }
  }
  split.gather_index = long_tensor(gather_index);
  return split;
}

}  // namespace ooze::models
