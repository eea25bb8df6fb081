// Parsing and validation of the safetensors layout, without LibTorch:
//
//   [8 bytes: header length N, little-endian u64][N bytes: UTF-8 JSON header][data section]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data section) plus an optional "__metadata__" object of strings.
// Every malformed input throws ooze::FormatError naming the file, the tensor and the problem;
// nothing here reads outside the buffer it is given. Like the reference library, the tensors
// must tile the data section exactly (no overlaps, holes or trailing bytes). Kept torch-free so the
// AddressSanitizer fuzz target can compile it on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ooze {

// The dtypes of the safetensors spec that ooze parses. Only some have a LibTorch equivalent
// (see core/safetensors.h); the others can still be validated and skipped.
enum class SafetensorsDtype {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64,
};

// The spelling used in headers ("F32", "BF16", ...).
const char* safetensors_dtype_name(SafetensorsDtype dtype);
// Bytes per element.
size_t safetensors_dtype_size(SafetensorsDtype dtype);
// Inverse of safetensors_dtype_name; nullopt for anything else.
std::optional<SafetensorsDtype> parse_safetensors_dtype(const std::string& name);

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape;  // empty for a 0-d scalar
  // Byte range inside the data section: [data_begin, data_end).
  uint64_t data_begin = 0;
  uint64_t data_end = 0;

  uint64_t nbytes() const { return data_end - data_begin; }
};

struct SafetensorsHeader {
  // File offset where the data section starts (8 + header length).
  uint64_t data_offset = 0;
  uint64_t data_size = 0;
  // Sorted by name.
  std::vector<SafetensorsTensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

// The safetensors reference library refuses headers above 100 MB; so do we, so that a corrupt
// length field cannot make us parse (or allocate for) gigabytes of "JSON".
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Validates `file_size` bytes at `bytes` (a whole safetensors file) and returns its header.
// `path` only appears in error messages.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                           const std::string& path);

}  // namespace ooze
