// Weight-sync buckets: how a model's tensors are cut into byte buffers of bounded size, laid out
// inside them, and read back. Every transfer path (shared memory, CUDA IPC, broadcast) moves
// these buffers; the manifest travelling with each says what the bytes are.
//
//   std::vector<BucketManifest> plan = plan_buckets(specs, options.update_weight_buffer_size);
//   for (const BucketManifest& bucket : plan) {
//     at::Tensor buffer = pack_bucket(bucket, tensors_in_entry_order(bucket));  // trainer side
//     ...send `bucket` (cereal) and `buffer`...
//     engine.load_weights(unpack_bucket(bucket, buffer), version);              // engine side
//   }
//
// Layout of one bucket: a single contiguous uint8 buffer. Its tensors are grouped by dtype
// (bucket_dtype_order(): every bfloat16 tensor, then every float16, then float32, ...), the
// Hugging Face order kept within a dtype, so a receiver can treat each dtype group as one flat
// tensor. Every tensor starts at a multiple of kBucketAlignment bytes and occupies a whole
// number of such slots, so each view is aligned for any dtype and for CUDA's vectorized loads,
// and a bucket's size (the sum of its slots) keeps the next bucket aligned when buckets sit
// back to back in one arena. Padding bytes are zero after packing.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cereal/cereal.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ooze::weight_sync {

// Slime's --update-weight-buffer-size default: 512 MiB per bucket.
constexpr int64_t kDefaultUpdateWeightBufferSize = int64_t{512} << 20;

// Where every tensor of a bucket starts, in bytes from the buffer's start.
constexpr int64_t kBucketAlignment = 256;

// A tensor to be synced, as the trainer will produce it (already in the engine's dtype).
struct TensorSpec {
  std::string name;  // Hugging Face name ("model.layers.0.self_attn.q_proj.weight")
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;

  int64_t numel() const;
  int64_t nbytes() const;  // numel() x element size
};

// One tensor inside a bucket's buffer: bytes [offset, offset + nbytes).
struct BucketEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t nbytes = 0;
};

// What one bucket's buffer holds: entries in layout (offset) order.
struct BucketManifest {
  int64_t index = 0;   // position of the bucket in its plan, for messages and ordering
  int64_t nbytes = 0;  // size of the buffer
  std::vector<BucketEntry> entries;
};

// The dtypes a bucket can hold, in the order their groups appear in a bucket:
// bfloat16, float16, float32, float64, int64, int32, int16, int8, uint8, bool.
const std::vector<at::ScalarType>& bucket_dtype_order();

// Walks `tensors` in the given (Hugging Face) order and starts a new bucket when the next
// tensor's slot would take the current bucket past max_bucket_bytes. A bucket's size is the sum
// of its tensors' sizes, each rounded up to kBucketAlignment; it is at most max_bucket_bytes
// unless it holds a single tensor too large for any bucket. No bucket is empty; zero-element
// tensors are allowed. Every tensor appears in exactly one entry.
// Throws ConfigError for max_bucket_bytes <= 0, an empty or duplicate name, a dtype outside
// bucket_dtype_order(), a negative dimension, or a size that overflows int64.
std::vector<BucketManifest> plan_buckets(const std::vector<TensorSpec>& tensors,
                                         int64_t max_bucket_bytes);

// Throws FormatError, naming the bucket and the entry, unless the manifest is consistent:
// index and nbytes not negative; names non-empty and distinct; shapes without negative
// dimensions; each entry's nbytes = numel x element size; offsets multiples of
// kBucketAlignment, inside the buffer; no two entries overlapping. Manifests read from an
// archive are checked on load; pack_into and unpack_bucket check theirs.
void validate_manifest(const BucketManifest& manifest);

// Copies tensors[i] (any device, any strides) into manifest.entries[i]'s bytes of `buffer`, one
// copy per tensor and no temporaries (a copy across devices of a non-contiguous tensor is the
// exception: LibTorch stages it contiguously), and zeroes the padding. `buffer` is a contiguous
// 1-D uint8 tensor of manifest.nbytes elements on any device. A floating tensor is converted
// to its floating entry's dtype as it is copied (round to nearest even, as Tensor::to). A
// tensor whose shape differs from its entry's, another dtype mismatch, or a count that differs
// throws Error; a malformed manifest or buffer throws FormatError.
void pack_into(const BucketManifest& manifest, const std::vector<at::Tensor>& tensors,
               at::Tensor& buffer);
// The same, with each entry's tensor asked for as `tensor_of(i)` just before it is copied, the
// entries visited in `order` (every entry once): for tensors that are views of memory the
// caller reuses from one entry to the next. A bad tensor throws Error when its turn comes.
void pack_into(const BucketManifest& manifest, const std::vector<size_t>& order,
               const std::function<at::Tensor(size_t entry)>& tensor_of, at::Tensor& buffer);

// pack_into a new buffer on `device`.
at::Tensor pack_bucket(const BucketManifest& manifest, const std::vector<at::Tensor>& tensors,
                       at::Device device = at::kCPU);

// The bucket's tensors, in entry order, as views of `buffer` (no copy: they share its storage
// and keep it alive) with each entry's dtype and shape, ready for
// engine::Engine::load_weights. Throws FormatError naming the bucket (and entry) when the
// manifest is malformed or `buffer` is not a contiguous 1-D uint8 tensor of manifest.nbytes
// elements whose entries can be viewed in place.
std::vector<std::pair<std::string, at::Tensor>> unpack_bucket(const BucketManifest& manifest,
                                                              const at::Tensor& buffer);

// Cereal wire form (binary archives). Dtypes travel as ooze's own codes (those of
// core/tensor_serialization.h), names and shapes with bounded lengths read before anything is
// allocated; a loaded manifest is checked with validate_manifest. Bytes that do not describe a
// valid manifest throw FormatError.
namespace detail {
uint8_t bucket_dtype_code(at::ScalarType dtype);
at::ScalarType bucket_dtype_from_code(uint8_t code);
void check_name_length(uint64_t length);
void check_rank(uint64_t rank);
}  // namespace detail

template <class Archive>
void save(Archive& ar, const BucketEntry& entry) {
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(entry.name.size())));
  ar(cereal::binary_data(entry.name.data(), entry.name.size()));
  ar(detail::bucket_dtype_code(entry.dtype));
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(entry.shape.size())));
  for (int64_t size : entry.shape) ar(size);
  ar(entry.offset, entry.nbytes);
}

template <class Archive>
void load(Archive& ar, BucketEntry& entry) {
  cereal::size_type length = 0;
  ar(cereal::make_size_tag(length));
  detail::check_name_length(length);
  entry.name.resize(length);
  ar(cereal::binary_data(entry.name.data(), length));
  uint8_t code = 0;
  ar(code);
  entry.dtype = detail::bucket_dtype_from_code(code);
  cereal::size_type rank = 0;
  ar(cereal::make_size_tag(rank));
  detail::check_rank(rank);
  entry.shape.resize(rank);
  for (int64_t& size : entry.shape) ar(size);
  ar(entry.offset, entry.nbytes);
}

template <class Archive>
void save(Archive& ar, const BucketManifest& manifest) {
  ar(manifest.index, manifest.nbytes);
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(manifest.entries.size())));
  for (const BucketEntry& entry : manifest.entries) ar(entry);
}

template <class Archive>
void load(Archive& ar, BucketManifest& manifest) {
  ar(manifest.index, manifest.nbytes);
  cereal::size_type count = 0;
  ar(cereal::make_size_tag(count));
  // No reserve(count): a corrupt count then fails on the missing bytes, not on an allocation.
  manifest.entries.clear();
  for (cereal::size_type i = 0; i < count; ++i) {
    BucketEntry entry;
    ar(entry);
    manifest.entries.push_back(std::move(entry));
  }
  validate_manifest(manifest);
}

}  // namespace ooze::weight_sync
