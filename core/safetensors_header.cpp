#include "core/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "core/error.h"

namespace ooze {
namespace {

using json = nlohmann::json;

struct DtypeEntry {
  SafetensorsDtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {SafetensorsDtype::BOOL, "BOOL", 1},       {SafetensorsDtype::U8, "U8", 1},
    {SafetensorsDtype::I8, "I8", 1},           {SafetensorsDtype::F8_E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::F8_E4M3, "F8_E4M3", 1}, {SafetensorsDtype::I16, "I16", 2},
    {SafetensorsDtype::U16, "U16", 2},         {SafetensorsDtype::F16, "F16", 2},
    {SafetensorsDtype::BF16, "BF16", 2},       {SafetensorsDtype::I32, "I32", 4},
    {SafetensorsDtype::U32, "U32", 4},         {SafetensorsDtype::F32, "F32", 4},
    {SafetensorsDtype::F64, "F64", 8},         {SafetensorsDtype::I64, "I64", 8},
    {SafetensorsDtype::U64, "U64", 8},
};

const DtypeEntry& dtype_entry(SafetensorsDtype dtype) {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.dtype == dtype) return entry;
  }
  throw Error("unknown SafetensorsDtype value " + std::to_string(static_cast<int>(dtype)));
}

std::string known_dtype_names() {
  std::string names;
  for (const DtypeEntry& entry : kDtypes) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

// Names come from untrusted files; keep messages readable when one is megabytes long.
std::string shown(const std::string& text) {
  constexpr size_t kMaxShown = 120;
  if (text.size() <= kMaxShown) return "'" + text + "'";
  return "'" + text.substr(0, kMaxShown) + "...' (" + std::to_string(text.size()) + " bytes)";
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw FormatError("safetensors file '" + path + "': " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  fail(path, "tensor " + shown(name) + ": " + what);
}

uint64_t read_le_u64(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// A JSON value that must be a non-negative integer; `what` names it in the message.
uint64_t to_unsigned(const json& value, const std::string& path, const std::string& name,
                     const std::string& what) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    fail_tensor(path, name, what + " is negative (" + value.dump() + ")");
  }
  if (value.is_number_float()) {
    fail_tensor(path, name, what + " is not an integer (" + value.dump() + ")");
  }
  fail_tensor(path, name,
              what + " must be a non-negative integer, not a " + std::string(value.type_name()));
}

// Rejects what no valid header contains before the DOM is built: duplicate names (JSON would
// silently keep the last one) and nesting deeper than tensor -> shape -> dim.
json parse_json(const uint8_t* begin, const uint8_t* end, const std::string& path) {
  std::set<std::string> seen_names;
  std::string current_name;
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      current_name = parsed.get_ref<const std::string&>();
      if (!seen_names.insert(current_name).second) {
        fail_tensor(path, current_name, "appears twice in the header");
      }
    }
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= 3) {
      fail_tensor(path, current_name, "entry is nested deeper than any safetensors header can be");
    }
    return true;
  };
  try {
    return json::parse(begin, end, check);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not valid JSON (") + e.what() +
                   "); the file is corrupt or not safetensors");
  }
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& path) {
  if (!value.is_object()) {
    fail(path,
         "__metadata__ must be an object of strings, not a " + std::string(value.type_name()));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      fail(path, "__metadata__ value for key " + shown(key) + " is a " +
                     std::string(item.type_name()) + "; metadata values must be strings");
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

SafetensorsTensorInfo parse_tensor(const std::string& name, const json& entry, uint64_t data_size,
                                   const std::string& path) {
  if (!entry.is_object()) {
    fail_tensor(path, name, "entry must be an object, not a " + std::string(entry.type_name()));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field))
      fail_tensor(path, name, std::string("missing field '") + field + "'");
  }
  for (const auto& [field, unused] : entry.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets") {
      fail_tensor(path, name,
                  "unexpected field " + shown(field) + " (expected dtype, shape, data_offsets)");
    }
  }

  SafetensorsTensorInfo info;
  info.name = name;

  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    fail_tensor(path, name, "dtype must be a string, not a " + std::string(dtype.type_name()));
  }
  std::optional<SafetensorsDtype> parsed_dtype = parse_safetensors_dtype(dtype.get<std::string>());
  if (!parsed_dtype) {
    fail_tensor(path, name,
                "unknown dtype " + shown(dtype.get<std::string>()) +
                    " (known: " + known_dtype_names() + ")");
  }
  info.dtype = *parsed_dtype;

  const json& shape = entry["shape"];
  if (!shape.is_array()) {
    fail_tensor(path, name, "shape must be an array, not a " + std::string(shape.type_name()));
  }
  // numel * itemsize must equal the byte range. Multiply with overflow checks so a shape like
  // [2^32, 2^32, 16] cannot wrap around to a small number that happens to match, and skip zero
  // dims in the product so [0, 2^62, 2^62] is refused too: LibTorch computes strides from the
  // other dims and cannot create that tensor even though it is empty.
  uint64_t nonzero_dims_bytes = safetensors_dtype_size(info.dtype);
  bool has_zero_dim = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t dim = to_unsigned(shape[i], path, name, "shape[" + std::to_string(i) + "]");
    if (dim == 0) {
      has_zero_dim = true;
    } else if (__builtin_mul_overflow(nonzero_dims_bytes, dim, &nonzero_dims_bytes) ||
               nonzero_dims_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_tensor(path, name, "shape " + shape.dump() + " is too large to exist");
    }
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  const uint64_t nbytes = has_zero_dim ? 0 : nonzero_dims_bytes;

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    fail_tensor(
        path, name,
        "data_offsets must be an array [begin, end], not " +
            (offsets.is_array() ? "an array of " + std::to_string(offsets.size()) + " elements"
                                : "a " + std::string(offsets.type_name())));
  }
  info.data_begin = to_unsigned(offsets[0], path, name, "data_offsets begin");
  info.data_end = to_unsigned(offsets[1], path, name, "data_offsets end");
  const std::string range =
      "[" + std::to_string(info.data_begin) + ", " + std::to_string(info.data_end) + "]";
  if (info.data_begin > info.data_end) {
    fail_tensor(path, name, "data_offsets " + range + " has begin > end");
  }
  if (info.data_end > data_size) {
    fail_tensor(path, name,
                "data_offsets " + range + " ends past the data section (" +
                    std::to_string(data_size) + " bytes); the file is truncated");
  }
  if (info.nbytes() != nbytes) {
    fail_tensor(path, name,
                "shape " + shape.dump() + " of dtype " + dtype.get<std::string>() + " needs " +
                    std::to_string(nbytes) + " bytes but data_offsets " + range + " span " +
                    std::to_string(info.nbytes()));
  }
  return info;
}

// The spec requires the tensors to tile the data section exactly: no overlaps, no holes, no
// trailing bytes. The reference library enforces this, so every file it writes or can read
// passes; enforcing it too rejects spliced or truncated files early and covers overlaps.
void check_tiling(const std::vector<SafetensorsTensorInfo>& tensors, uint64_t data_size,
                  const std::string& path) {
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const SafetensorsTensorInfo& info : tensors) by_offset.push_back(&info);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::tie(a->data_begin, a->data_end) < std::tie(b->data_begin, b->data_end);
  });
  uint64_t covered = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo* info : by_offset) {
    if (info->data_begin < covered) {
      fail_tensor(path, info->name,
                  "data_offsets [" + std::to_string(info->data_begin) + ", " +
                      std::to_string(info->data_end) + "] overlap tensor " + shown(previous->name));
    }
    if (info->data_begin > covered) {
      fail_tensor(path, info->name,
                  "data_offsets begin at " + std::to_string(info->data_begin) +
                      " but the previous tensor ends at " + std::to_string(covered) +
                      "; the data section must have no holes");
    }
    covered = info->data_end;
    previous = info;
  }
  if (covered != data_size) {
    fail(path, "the data section has " + std::to_string(data_size) +
                   " bytes but the tensors cover only " + std::to_string(covered) +
                   "; the file has trailing bytes or its header is incomplete");
  }
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDtype dtype) { return dtype_entry(dtype).name; }

size_t safetensors_dtype_size(SafetensorsDtype dtype) { return dtype_entry(dtype).size; }

std::optional<SafetensorsDtype> parse_safetensors_dtype(const std::string& name) {
  for (const DtypeEntry& entry : kDtypes) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                           const std::string& path) {
  if (file_size < 8) {
    fail(path, "file is " + std::to_string(file_size) +
                   " bytes, shorter than the 8-byte header length; it is truncated or not "
                   "safetensors");
  }
  const uint64_t header_size = read_le_u64(bytes);
  if (header_size > kMaxSafetensorsHeaderBytes) {
    fail(path, "header length " + std::to_string(header_size) + " exceeds the " +
                   std::to_string(kMaxSafetensorsHeaderBytes) +
                   "-byte limit; the file is corrupt or not safetensors");
  }
  if (header_size > file_size - 8) {
    fail(path, "header length " + std::to_string(header_size) + " runs past the end of the " +
                   std::to_string(file_size) + "-byte file; it is truncated or corrupt");
  }

  SafetensorsHeader header;
  header.data_offset = 8 + header_size;
  header.data_size = file_size - header.data_offset;

  const json root = parse_json(bytes + 8, bytes + header.data_offset, path);
  if (!root.is_object()) {
    fail(path, "header must be a JSON object, not a " + std::string(root.type_name()));
  }
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      header.metadata = parse_metadata(entry, path);
    } else {
      header.tensors.push_back(parse_tensor(name, entry, header.data_size, path));
    }
  }
  // json objects iterate in key order, so `tensors` is already sorted by name.
  check_tiling(header.tensors, header.data_size, path);
  return header;
}

}  // namespace ooze
