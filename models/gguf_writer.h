// A GGUF file (version 3), the format llama.cpp loads: a header, typed metadata key-values,
// tensor descriptions, then the tensors' bytes, each at a multiple of the alignment (32).
//
//   GgufWriter gguf;
//   gguf.add_string("general.architecture", "qwen3");
//   gguf.add_uint32("qwen3.block_count", 28);
//   gguf.add_tensor("token_embd.weight", embedding, GgufType::kF16);
//   gguf.write("/models/qwen3.gguf");
//
// Metadata is written in the order it was added. A tensor's dimensions are written innermost
// first (GGUF's order, the reverse of PyTorch's shape). Tensors are held as given (mapped
// safetensors stay mapped) and converted one at a time while the file is written, so writing
// takes one tensor's converted copy of memory, not the model's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace ooze::models {

// ggml's tensor types that ooze writes (ggml_type numbering).
enum class GgufType : uint32_t { kF32 = 0, kF16 = 1 };

class GgufWriter {
 public:
  // Metadata. GGUF types are strict (llama.cpp refuses a u32 key written as i32): each call
  // writes exactly its type.
  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_strings(const std::string& key, std::vector<std::string> values);
  void add_int32s(const std::string& key, std::vector<int32_t> values);

  // `tensor` (any floating dtype, CPU) is written as `type`. Throws Error for a repeated name
  // or a non-floating tensor.
  void add_tensor(const std::string& name, at::Tensor tensor, GgufType type);

  // Writes the file atomically (a temporary renamed into place; the space reserved first, so a
  // full disk fails before any byte is written and names the bytes needed). Throws IoError.
  // Returns the file's size in bytes.
  uint64_t write(const std::string& path) const;

 private:
  using Value = std::variant<uint32_t, int32_t, float, bool, std::string, std::vector<std::string>,
                             std::vector<int32_t>>;
  struct Tensor {
    std::string name;
    at::Tensor data;
    GgufType type;
  };

  void add(const std::string& key, Value value);

  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace ooze::models
