#include "weight_sync/bucket.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_set>

#include "core/bfloat16_conversion.h"
#include "core/error.h"

namespace ooze::weight_sync {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The same codes as core/tensor_serialization.cpp's, so a dtype reads the same in every ooze
// archive. Never renumber; append.
struct WireDtype {
  uint8_t code;
  at::ScalarType dtype;
  const char* name;  // as users write it in configs
};
constexpr WireDtype kWireDtypes[] = {
    {1, at::kFloat, "float32"},     {2, at::kDouble, "float64"}, {3, at::kHalf, "float16"},
    {4, at::kBFloat16, "bfloat16"}, {5, at::kChar, "int8"},      {6, at::kShort, "int16"},
    {7, at::kInt, "int32"},         {8, at::kLong, "int64"},     {9, at::kByte, "uint8"},
    {10, at::kBool, "bool"},
};

// Bounds on what a manifest from another process may claim, checked before allocating.
constexpr uint64_t kMaxNameLength = 64 * 1024;
constexpr uint64_t kMaxRank = 64;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t size : shape) text += (text.empty() ? "" : ", ") + std::to_string(size);
  return "[" + text + "]";
}

std::string dtype_text(at::ScalarType dtype) {
  for (const WireDtype& wire : kWireDtypes) {
    if (wire.dtype == dtype) return wire.name;
  }
  return c10::toString(dtype);
}

// Position of `dtype` in bucket_dtype_order(), or -1.
int dtype_rank(at::ScalarType dtype) {
  const std::vector<at::ScalarType>& order = bucket_dtype_order();
  auto found = std::find(order.begin(), order.end(), dtype);
  return found == order.end() ? -1 : static_cast<int>(found - order.begin());
}

// numel x element size of a shape, or false when a dimension is negative or the product
// overflows int64.
bool checked_nbytes(at::ScalarType dtype, const std::vector<int64_t>& shape, int64_t* nbytes) {
  for (int64_t size : shape) {
    if (size < 0) return false;
    if (size == 0) {
      *nbytes = 0;
      return true;
    }
  }
  int64_t total = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t size : shape) {
    if (total > kInt64Max / size) return false;
    total *= size;
  }
  *nbytes = total;
  return true;
}

// `bytes` rounded up to kBucketAlignment, or -1 on overflow.
int64_t slot_bytes(int64_t bytes) {
  if (bytes > kInt64Max - (kBucketAlignment - 1)) return -1;
  return (bytes + kBucketAlignment - 1) / kBucketAlignment * kBucketAlignment;
}

std::string entry_text(const BucketManifest& manifest, size_t position) {
  return "weight-sync bucket " + std::to_string(manifest.index) + ", entry " +
         std::to_string(position) + " '" + manifest.entries[position].name + "'";
}

// The bucket holding specs[members...], laid out by dtype group.
BucketManifest lay_out(const std::vector<TensorSpec>& specs, const std::vector<size_t>& members,
                       int64_t index) {
  std::vector<size_t> ordered = members;
  std::stable_sort(ordered.begin(), ordered.end(), [&](size_t a, size_t b) {
    return dtype_rank(specs[a].dtype) < dtype_rank(specs[b].dtype);
  });
  BucketManifest manifest;
  manifest.index = index;
  manifest.entries.reserve(ordered.size());
  int64_t cursor = 0;
  for (size_t i : ordered) {
    BucketEntry entry;
    entry.name = specs[i].name;
    entry.dtype = specs[i].dtype;
    entry.shape = specs[i].shape;
    entry.offset = cursor;
    entry.nbytes = specs[i].nbytes();
    cursor += slot_bytes(entry.nbytes);
    manifest.entries.push_back(std::move(entry));
  }
  manifest.nbytes = cursor;
  return manifest;
}

// Throws FormatError unless `buffer` can hold `manifest`'s bytes in place.
void check_buffer(const BucketManifest& manifest, const at::Tensor& buffer, const char* action) {
  const std::string where = std::string(action) + " weight-sync bucket " +
                            std::to_string(manifest.index) + ": the buffer ";
  if (!buffer.defined()) throw FormatError(where + "is an undefined tensor");
  if (buffer.layout() != at::kStrided) {
    throw FormatError(where + "is not a dense (strided) tensor; pass a contiguous 1-D uint8 one");
  }
  if (buffer.scalar_type() != at::kByte || buffer.dim() != 1 || !buffer.is_contiguous()) {
    throw FormatError(where + "must be a contiguous 1-D uint8 tensor but is " +
                      dtype_text(buffer.scalar_type()) + " " + shape_text(buffer.sizes().vec()) +
                      (buffer.is_contiguous() ? "" : " (non-contiguous)"));
  }
  if (buffer.numel() != manifest.nbytes) {
    throw FormatError(where + "has " + std::to_string(buffer.numel()) +
                      " bytes but the manifest describes " + std::to_string(manifest.nbytes) +
                      "; the buffer and manifest do not belong together");
  }
}

// entry's bytes of `buffer` seen as its dtype and shape.
at::Tensor entry_view(const BucketManifest& manifest, size_t position, const at::Tensor& buffer) {
  const BucketEntry& entry = manifest.entries[position];
  const int64_t element_size = static_cast<int64_t>(c10::elementSize(entry.dtype));
  if ((buffer.storage_offset() + entry.offset) % element_size != 0) {
    throw FormatError(entry_text(manifest, position) + ": the buffer starts " +
                      std::to_string(buffer.storage_offset()) +
                      " bytes into its storage, which leaves this " + dtype_text(entry.dtype) +
                      " entry misaligned; give a buffer that starts at its storage's start (or "
                      "at a multiple of " +
                      std::to_string(kBucketAlignment) + " bytes)");
  }
  return buffer.narrow(0, entry.offset, entry.nbytes).view(entry.dtype).view(entry.shape);
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  return count;
}

int64_t TensorSpec::nbytes() const {
  return numel() * static_cast<int64_t>(c10::elementSize(dtype));
}

const std::vector<at::ScalarType>& bucket_dtype_order() {
  static const std::vector<at::ScalarType> order = {
      at::kBFloat16, at::kHalf,  at::kFloat, at::kDouble, at::kLong,
      at::kInt,      at::kShort, at::kChar,  at::kByte,   at::kBool};
  return order;
}

std::vector<BucketManifest> plan_buckets(const std::vector<TensorSpec>& tensors,
                                         int64_t max_bucket_bytes) {
  if (max_bucket_bytes <= 0) {
    throw ConfigError("update_weight_buffer_size = " + std::to_string(max_bucket_bytes) +
                      " bytes: a weight-sync bucket needs a positive size (default " +
                      std::to_string(kDefaultUpdateWeightBufferSize) + ")");
  }
  std::unordered_set<std::string> names;
  std::vector<int64_t> slots(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = tensors[i];
    const std::string where = "weight-sync tensor " + std::to_string(i) + " '" + spec.name + "'";
    if (spec.name.empty()) {
      throw ConfigError("weight-sync tensor " + std::to_string(i) +
                        " has an empty name; every synced tensor needs its Hugging Face name");
    }
    if (!names.insert(spec.name).second) {
      throw ConfigError(where + " appears twice; each tensor must be synced once");
    }
    if (dtype_rank(spec.dtype) < 0) {
      throw ConfigError(where + " has dtype " + dtype_text(spec.dtype) +
                        ", which weight sync does not carry (floating and integer dtypes, bool)");
    }
    int64_t nbytes = 0;
    if (!checked_nbytes(spec.dtype, spec.shape, &nbytes) || (slots[i] = slot_bytes(nbytes)) < 0) {
      throw ConfigError(where + " has shape " + shape_text(spec.shape) +
                        ", which has a negative dimension or too many bytes");
    }
  }

  std::vector<BucketManifest> plan;
  std::vector<size_t> members;
  int64_t used = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    // used <= max or a single oversized member, so the sum cannot overflow.
    if (!members.empty() && (slots[i] > max_bucket_bytes - used)) {
      plan.push_back(lay_out(tensors, members, static_cast<int64_t>(plan.size())));
      members.clear();
      used = 0;
    }
    members.push_back(i);
    used += slots[i];
  }
  if (!members.empty())
    plan.push_back(lay_out(tensors, members, static_cast<int64_t>(plan.size())));
  return plan;
}

void validate_manifest(const BucketManifest& manifest) {
  const std::string bucket = "weight-sync bucket " + std::to_string(manifest.index);
  const std::string advice = "; the manifest is corrupt or was not made by plan_buckets";
  if (manifest.index < 0) throw FormatError(bucket + " has a negative index" + advice);
  if (manifest.nbytes < 0) {
    throw FormatError(bucket + " claims " + std::to_string(manifest.nbytes) + " bytes" + advice);
  }
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < manifest.entries.size(); ++i) {
    const BucketEntry& entry = manifest.entries[i];
    const std::string where = entry_text(manifest, i);
    if (entry.name.empty()) throw FormatError(where + " has an empty name" + advice);
    if (!names.insert(entry.name).second) {
      throw FormatError(where + " repeats the name of an earlier entry" + advice);
    }
    if (dtype_rank(entry.dtype) < 0) {
      throw FormatError(where + " has dtype " + dtype_text(entry.dtype) +
                        ", which weight sync does not carry" + advice);
    }
    int64_t expected = 0;
    if (!checked_nbytes(entry.dtype, entry.shape, &expected)) {
      throw FormatError(where + " has shape " + shape_text(entry.shape) +
                        ", which has a negative dimension or too many bytes" + advice);
    }
    if (expected != entry.nbytes) {
      throw FormatError(where + " claims " + std::to_string(entry.nbytes) + " bytes, but " +
                        dtype_text(entry.dtype) + " " + shape_text(entry.shape) + " takes " +
                        std::to_string(expected) + advice);
    }
    if (entry.offset < 0 || entry.offset % kBucketAlignment != 0) {
      throw FormatError(where + " starts at offset " + std::to_string(entry.offset) +
                        ", which is not a non-negative multiple of " +
                        std::to_string(kBucketAlignment) + advice);
    }
    if (entry.offset > manifest.nbytes || entry.nbytes > manifest.nbytes - entry.offset) {
      throw FormatError(where + " spans bytes [" + std::to_string(entry.offset) + ", " +
                        std::to_string(entry.offset) + " + " + std::to_string(entry.nbytes) +
                        "), past the bucket's " + std::to_string(manifest.nbytes) + " bytes" +
                        advice);
    }
  }
  // Overlaps, between entries that hold bytes, in offset order.
  std::vector<size_t> by_offset;
  for (size_t i = 0; i < manifest.entries.size(); ++i) {
    if (manifest.entries[i].nbytes > 0) by_offset.push_back(i);
  }
  std::sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) {
    return manifest.entries[a].offset < manifest.entries[b].offset;
  });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const BucketEntry& previous = manifest.entries[by_offset[k - 1]];
    const BucketEntry& current = manifest.entries[by_offset[k]];
    if (current.offset < previous.offset + previous.nbytes) {
      throw FormatError(entry_text(manifest, by_offset[k]) + " at bytes [" +
                        std::to_string(current.offset) + ", " +
                        std::to_string(current.offset + current.nbytes) + ") overlaps entry " +
                        std::to_string(by_offset[k - 1]) + " '" + previous.name + "' at bytes [" +
                        std::to_string(previous.offset) + ", " +
                        std::to_string(previous.offset + previous.nbytes) + ")" + advice);
    }
  }
}

namespace {

void check_packed_tensor(const BucketManifest& manifest, size_t i, const at::Tensor& tensor) {
  const BucketEntry& entry = manifest.entries[i];
  // fp32 master weights become the engine's bf16 in the copy itself: no temporary.
  const bool converts = tensor.defined() && at::isFloatingType(tensor.scalar_type()) &&
                        at::isFloatingType(entry.dtype);
  if (!tensor.defined() || (tensor.scalar_type() != entry.dtype && !converts) ||
      tensor.sizes() != at::IntArrayRef(entry.shape)) {
    throw Error("packing " + entry_text(manifest, i) + ": expected " + dtype_text(entry.dtype) +
                " " + shape_text(entry.shape) + " but got " +
                (tensor.defined()
                     ? dtype_text(tensor.scalar_type()) + " " + shape_text(tensor.sizes().vec())
                     : std::string("an undefined tensor")) +
                "; only floating tensors are converted while packing; pass tensors in entry "
                "order");
  }
}

// Zeroes the bytes no entry covers, so equal weights always give equal bytes.
void zero_padding(const BucketManifest& manifest, at::Tensor& buffer) {
  std::vector<std::pair<int64_t, int64_t>> spans;  // [begin, end) of each entry
  spans.reserve(manifest.entries.size());
  for (const BucketEntry& entry : manifest.entries) {
    spans.emplace_back(entry.offset, entry.offset + entry.nbytes);
  }
  std::sort(spans.begin(), spans.end());
  int64_t cursor = 0;
  for (const auto& [begin, end] : spans) {
    if (begin > cursor) buffer.narrow(0, cursor, begin - cursor).zero_();
    cursor = std::max(cursor, end);
  }
  if (manifest.nbytes > cursor) buffer.narrow(0, cursor, manifest.nbytes - cursor).zero_();
}

}  // namespace

void pack_into(const BucketManifest& manifest, const std::vector<at::Tensor>& tensors,
               at::Tensor& buffer) {
  if (tensors.size() != manifest.entries.size()) {
    throw Error("packing weight-sync bucket " + std::to_string(manifest.index) + ": got " +
                std::to_string(tensors.size()) + " tensors for its " +
                std::to_string(manifest.entries.size()) +
                " entries; pass one tensor per entry, in entry order");
  }
  // All checked first: a wrong list writes nothing.
  for (size_t i = 0; i < tensors.size(); ++i) check_packed_tensor(manifest, i, tensors[i]);
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  pack_into(
      manifest, order, [&](size_t i) { return tensors[i]; }, buffer);
}

void pack_into(const BucketManifest& manifest, const std::vector<size_t>& order,
               const std::function<at::Tensor(size_t entry)>& tensor_of, at::Tensor& buffer) {
  validate_manifest(manifest);
  check_buffer(manifest, buffer, "packing");
  std::vector<bool> seen(manifest.entries.size(), false);
  for (size_t i : order) {
    if (i >= seen.size() || seen[i]) {
      throw Error("packing weight-sync bucket " + std::to_string(manifest.index) +
                  ": the order names entry " + std::to_string(i) +
                  (i >= seen.size() ? " of " + std::to_string(seen.size()) : " twice") +
                  "; name every entry once");
    }
    seen[i] = true;
  }
  if (order.size() != manifest.entries.size()) {
    throw Error("packing weight-sync bucket " + std::to_string(manifest.index) + ": the order " +
                "names " + std::to_string(order.size()) + " of its " +
                std::to_string(manifest.entries.size()) + " entries; name every entry once");
  }
  std::vector<at::Tensor> views;  // all made first: a misaligned buffer fails before any copy
  views.reserve(manifest.entries.size());
  for (size_t i = 0; i < manifest.entries.size(); ++i) {
    views.push_back(entry_view(manifest, i, buffer));
  }
  for (size_t i : order) {
    const at::Tensor tensor = tensor_of(i);
    check_packed_tensor(manifest, i, tensor);
    copy_converted(views[i], tensor);
  }
  zero_padding(manifest, buffer);
}

at::Tensor pack_bucket(const BucketManifest& manifest, const std::vector<at::Tensor>& tensors,
                       at::Device device) {
  validate_manifest(manifest);
  at::Tensor buffer = at::empty({manifest.nbytes}, at::TensorOptions(at::kByte).device(device));
  pack_into(manifest, tensors, buffer);
  return buffer;
}

std::vector<std::pair<std::string, at::Tensor>> unpack_bucket(const BucketManifest& manifest,
                                                              const at::Tensor& buffer) {
  validate_manifest(manifest);
  check_buffer(manifest, buffer, "unpacking");
  std::vector<std::pair<std::string, at::Tensor>> named;
  named.reserve(manifest.entries.size());
  for (size_t i = 0; i < manifest.entries.size(); ++i) {
    named.emplace_back(manifest.entries[i].name, entry_view(manifest, i, buffer));
  }
  return named;
}

namespace detail {

uint8_t bucket_dtype_code(at::ScalarType dtype) {
  for (const WireDtype& wire : kWireDtypes) {
    if (wire.dtype == dtype) return wire.code;
  }
  throw Error("cannot serialize a weight-sync bucket entry of dtype " + dtype_text(dtype) +
              ": weight sync carries floating and integer dtypes and bool");
}

at::ScalarType bucket_dtype_from_code(uint8_t code) {
  for (const WireDtype& wire : kWireDtypes) {
    if (wire.code == code) return wire.dtype;
  }
  throw FormatError("a serialized weight-sync bucket entry has dtype code " + std::to_string(code) +
                    ", which names no dtype (known: 1-10); the sender and receiver disagree on "
                    "the format or the bytes are corrupt");
}

void check_name_length(uint64_t length) {
  if (length == 0 || length > kMaxNameLength) {
    throw FormatError("a serialized weight-sync bucket entry has a name of " +
                      std::to_string(length) + " bytes (1 to " + std::to_string(kMaxNameLength) +
                      " allowed); the bytes are corrupt");
  }
}

void check_rank(uint64_t rank) {
  if (rank > kMaxRank) {
    throw FormatError("a serialized weight-sync bucket entry has " + std::to_string(rank) +
                      " dimensions (at most " + std::to_string(kMaxRank) +
                      "); the bytes are corrupt");
  }
}

}  // namespace detail
}  // namespace ooze::weight_sync
