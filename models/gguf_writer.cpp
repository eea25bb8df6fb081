#include "models/gguf_writer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ooze::models {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;  // GGUF's default; general.alignment is not written

// gguf_type: the type tag written before each metadata value.
enum ValueType : uint32_t {
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
};

// Every number in a GGUF file is little-endian, as on the machines ooze runs on.
template <class T>
void put(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, const std::string& text) {
  put<uint64_t>(out, text.size());
  out += text;
}

uint64_t padded(uint64_t offset) { return (offset + kAlignment - 1) / kAlignment * kAlignment; }

at::ScalarType scalar_type(GgufType type) {
  return type == GgufType::kF16 ? at::kHalf : at::kFloat;
}

uint64_t byte_size(const at::Tensor& tensor, GgufType type) {
  return static_cast<uint64_t>(tensor.numel()) * (type == GgufType::kF16 ? 2 : 4);
}

}  // namespace

void GgufWriter::add(const std::string& key, Value value) {
  for (const auto& [existing, _] : metadata_) {
    if (existing == key) throw Error("GGUF metadata key '" + key + "' added twice");
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_uint32(const std::string& key, uint32_t value) { add(key, value); }
void GgufWriter::add_int32(const std::string& key, int32_t value) { add(key, value); }
void GgufWriter::add_float32(const std::string& key, float value) { add(key, value); }
void GgufWriter::add_bool(const std::string& key, bool value) { add(key, value); }
void GgufWriter::add_string(const std::string& key, const std::string& value) { add(key, value); }
void GgufWriter::add_strings(const std::string& key, std::vector<std::string> values) {
  add(key, std::move(values));
}
void GgufWriter::add_int32s(const std::string& key, std::vector<int32_t> values) {
  add(key, std::move(values));
}

void GgufWriter::add_tensor(const std::string& name, at::Tensor tensor, GgufType type) {
  for (const Tensor& existing : tensors_) {
    if (existing.name == name) throw Error("GGUF tensor '" + name + "' added twice");
  }
  if (!at::isFloatingType(tensor.scalar_type())) {
    throw Error("GGUF tensor '" + name + "' is " +
                std::string(c10::toString(tensor.scalar_type())) +
                "; only floating tensors are written");
  }
  tensors_.push_back({name, std::move(tensor), type});
}

uint64_t GgufWriter::write(const std::string& path) const {
  std::string header;
  header += "GGUF";
  put<uint32_t>(header, kVersion);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(header, key);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, uint32_t>) {
            put<uint32_t>(header, kUint32);
            put<uint32_t>(header, v);
          } else if constexpr (std::is_same_v<T, int32_t>) {
            put<uint32_t>(header, kInt32);
            put<int32_t>(header, v);
          } else if constexpr (std::is_same_v<T, float>) {
            put<uint32_t>(header, kFloat32);
            put<float>(header, v);
          } else if constexpr (std::is_same_v<T, bool>) {
            put<uint32_t>(header, kBool);
            put<uint8_t>(header, v ? 1 : 0);
          } else if constexpr (std::is_same_v<T, std::string>) {
            put<uint32_t>(header, kString);
            put_string(header, v);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            put<uint32_t>(header, kArray);
            put<uint32_t>(header, kString);
            put<uint64_t>(header, v.size());
            for (const std::string& text : v) put_string(header, text);
          } else {
            put<uint32_t>(header, kArray);
            put<uint32_t>(header, kInt32);
            put<uint64_t>(header, v.size());
            for (int32_t number : v) put<int32_t>(header, number);
          }
        },
        value);
  }
  // Tensor descriptions: offsets count from the start of the data section.
  uint64_t offset = 0;
  for (const Tensor& tensor : tensors_) {
    put_string(header, tensor.name);
    put<uint32_t>(header, static_cast<uint32_t>(tensor.data.dim()));
    for (int64_t d = tensor.data.dim() - 1; d >= 0; --d) {
      put<uint64_t>(header, static_cast<uint64_t>(tensor.data.size(d)));
    }
    put<uint32_t>(header, static_cast<uint32_t>(tensor.type));
    put<uint64_t>(header, offset);
    offset = padded(offset + byte_size(tensor.data, tensor.type));
  }
  header.resize(padded(header.size()), '\0');
  const uint64_t total = header.size() + offset;

  AtomicFile file(path);
  file.reserve(total);
  file.write(header);
  uint64_t written = 0;
  const std::string zeros(kAlignment, '\0');
  for (const Tensor& tensor : tensors_) {
    const at::Tensor converted = tensor.data.to(scalar_type(tensor.type)).contiguous();
    const uint64_t size = byte_size(tensor.data, tensor.type);
    file.write(converted.data_ptr(), size);
    written += size;
    file.write(zeros.data(), padded(written) - written);
    written = padded(written);
  }
  file.commit();
  return total;
}

}  // namespace ooze::models
