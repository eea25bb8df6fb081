// Safetensors checkpoints on LibTorch: zero-copy reading through mmap, atomic writing, and
// Hugging Face's sharded layout (model-00001-of-0000N.safetensors + model.safetensors.index.json).
//
//   SafetensorsFile file = SafetensorsFile::open("model.safetensors");
//   at::Tensor w = file.tensor("lm_head.weight");          // views the mapped file
//   save_safetensors("out.safetensors", {{"w", w}}, {{"format", "pt"}});
//
// Tensors returned by tensor() view read-only memory (PROT_READ): they stay valid after the
// file object is gone, but writing into them in place faults. Copy them into parameters
// (param.copy_(t)) or clone() them before modifying. As with any mmap, a file truncated by
// another process while mapped makes later reads fault: never rewrite a checkpoint in place (our
// writer replaces files by rename, which is safe). Little-endian machines only.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/checksum.h"
#include "core/safetensors_header.h"

namespace ooze {

// In the caller's order, which decides the split into shards. Inside a file, tensors are laid
// out largest item size first, as the reference writer does, so every one is aligned.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

// F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL map both ways; the other safetensors
// dtypes (U16, U32, U64, F8_*) have no LibTorch 1.13 counterpart and throw FormatError.
at::ScalarType to_scalar_type(SafetensorsDtype dtype);
// Throws ooze::Error for dtypes safetensors cannot store (complex, quantized, ...).
SafetensorsDtype to_safetensors_dtype(at::ScalarType type);

// A memory-mapped, validated safetensors file. Cheap to copy: copies share the mapping.
class SafetensorsFile {
 public:
  // Throws IoError if the file cannot be opened or mapped, FormatError if it is malformed.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Sorted by name.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // Throws ooze::Error naming the file if there is no such tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // Zero-copy view of the mapped bytes (a copy only if they are not aligned to the item size);
  // the tensor keeps the mapping alive.
  at::Tensor tensor(const std::string& name) const;
  const SafetensorsMetadata& metadata() const { return header_.metadata; }

 private:
  struct Mapping;
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_by_name_;  // into header_.tensors
};

// Writes `tensors` (any layout, CPU only) to `path` atomically: the bytes go to
// "<path>.tmp.<pid>", are fsync'ed, then renamed over `path`, so a crash or an error never
// leaves a partial file under `path`. Throws ooze::Error for duplicate names, non-CPU tensors
// or unsupported dtypes before touching the disk, IoError if writing fails. Returns the CRC-32 and
// size of the bytes written, summed as they went out (a second read of the file would only read
// the same bytes back from the page cache).
FileChecksum save_safetensors(const std::string& path, const NamedTensors& tensors,
                              const SafetensorsMetadata& metadata = {});

// Hugging Face's file names for the sharded layout.
constexpr const char* kSafetensorsSingleFile = "model.safetensors";
constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";

// Splits `tensors` (in order) into shards of at most `max_shard_bytes` each (a larger tensor
// gets a shard of its own), as transformers' save_pretrained does, and writes them into `dir`
// (created if missing) as model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
// One shard is written as plain model.safetensors without an index. Every file's metadata gets
// "format": "pt" unless `metadata` sets it (transformers refuses shards without it). Files of an
// earlier save that the new layout does not use (old shards, a stale index) are removed last. Each
// file is written atomically, but a crash between files can leave a mix of old and new shards: save
// each checkpoint into a fresh directory when that matters.
void save_sharded_safetensors(const std::string& dir, const NamedTensors& tensors,
                              uint64_t max_shard_bytes, const SafetensorsMetadata& metadata = {});

// Reads a directory in either layout written above (or by Hugging Face): the index and its
// shards, or a single model.safetensors. open() maps and validates every file and checks that
// each tensor is where the index says; tensor data is only paged in when used.
class ShardedSafetensors {
 public:
  // Throws IoError if `dir` holds neither layout, FormatError for a malformed index, a missing
  // shard or a tensor missing from the shard the index names.
  static ShardedSafetensors open(const std::string& dir);

  // Sorted by name.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const SafetensorsTensorInfo& info(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;
  // The file (name inside the directory) that holds `name`.
  const std::string& file_of(const std::string& name) const;

 private:
  ShardedSafetensors() = default;
  const SafetensorsFile& file_holding(const std::string& name) const;

  std::string dir_;
  std::map<std::string, SafetensorsFile> files_;   // by file name
  std::map<std::string, std::string> weight_map_;  // tensor name -> file name
};

}  // namespace ooze
