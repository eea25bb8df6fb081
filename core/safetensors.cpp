#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"

// Safetensors stores little-endian bytes and tensors view them as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O needs little-endian");

namespace ooze {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::optional<at::ScalarType> torch_type_of(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::F64:
      return at::kDouble;
    case SafetensorsDtype::F32:
      return at::kFloat;
    case SafetensorsDtype::F16:
      return at::kHalf;
    case SafetensorsDtype::BF16:
      return at::kBFloat16;
    case SafetensorsDtype::I64:
      return at::kLong;
    case SafetensorsDtype::I32:
      return at::kInt;
    case SafetensorsDtype::I16:
      return at::kShort;
    case SafetensorsDtype::I8:
      return at::kChar;
    case SafetensorsDtype::U8:
      return at::kByte;
    case SafetensorsDtype::BOOL:
      return at::kBool;
    default:
      return std::nullopt;  // U16, U32, U64, F8_*: not in LibTorch 1.13
  }
}

std::string errno_text() { return std::strerror(errno); }

uint64_t nbytes_of(const at::Tensor& tensor) {
  return static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
}

// Everything save_* can reject is rejected here, before any file is created.
void check_savable(const NamedTensors& tensors) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    const std::string where = "cannot save tensor '" + name + "' as safetensors: ";
    if (name == "__metadata__") throw Error(where + "the name is reserved for metadata");
    if (!names.insert(name).second) throw Error(where + "the name appears twice");
    if (!tensor.defined()) throw Error(where + "the tensor is undefined");
    if (!tensor.device().is_cpu()) {
      throw Error(where + "it is on " + tensor.device().str() + "; move it to the CPU first");
    }
    if (tensor.layout() != at::kStrided) {
      throw Error(where + "only dense (strided) tensors can be stored; call to_dense() first");
    }
    to_safetensors_dtype(tensor.scalar_type());
  }
}

// "model-00002-of-00005.safetensors", transformers' naming.
std::string shard_file_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

bool is_shard_file_name(const std::string& name) {
  const std::string prefix = "model-", middle = "-of-", suffix = ".safetensors";
  if (name.size() <= prefix.size() + middle.size() + suffix.size() ||
      name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string numbers =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t split = numbers.find(middle);
  if (split == std::string::npos || split == 0 || split + middle.size() == numbers.size()) {
    return false;
  }
  const std::string digits = numbers.substr(0, split) + numbers.substr(split + middle.size());
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Files of an earlier save into `dir` that the layout just written does not use. Without this a
// stale index could point a later open() at old shards.
void remove_stale_files(const std::string& dir, const std::set<std::string>& keep) {
  try {
    std::vector<fs::path> stale;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (keep.count(name)) continue;
      if (name == kSafetensorsSingleFile || name == kSafetensorsIndexFile ||
          is_shard_file_name(name)) {
        stale.push_back(entry.path());
      }
    }
    for (const fs::path& path : stale) fs::remove(path);
  } catch (const fs::filesystem_error& e) {
    throw IoError("removing files of an earlier checkpoint from '" + dir + "' failed (" + e.what() +
                  "); delete them by hand, the new files are complete");
  }
}

// Like fs::exists, but a permission problem is an IoError rather than a filesystem_error.
bool file_exists(const fs::path& path) {
  std::error_code error;
  const bool exists = fs::exists(path, error);
  if (error) throw IoError("cannot check '" + path.string() + "': " + error.message());
  return exists;
}

json read_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open '" + path + "': " + errno_text());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw FormatError("index file '" + path + "' is not valid JSON: " + e.what());
  }
}

}  // namespace

at::ScalarType to_scalar_type(SafetensorsDtype dtype) {
  std::optional<at::ScalarType> type = torch_type_of(dtype);
  if (!type) {
    throw FormatError(std::string("safetensors dtype ") + safetensors_dtype_name(dtype) +
                      " has no LibTorch equivalent; convert the checkpoint to a supported dtype "
                      "(F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  }
  return *type;
}

SafetensorsDtype to_safetensors_dtype(at::ScalarType type) {
  switch (type) {
    case at::kDouble:
      return SafetensorsDtype::F64;
    case at::kFloat:
      return SafetensorsDtype::F32;
    case at::kHalf:
      return SafetensorsDtype::F16;
    case at::kBFloat16:
      return SafetensorsDtype::BF16;
    case at::kLong:
      return SafetensorsDtype::I64;
    case at::kInt:
      return SafetensorsDtype::I32;
    case at::kShort:
      return SafetensorsDtype::I16;
    case at::kChar:
      return SafetensorsDtype::I8;
    case at::kByte:
      return SafetensorsDtype::U8;
    case at::kBool:
      return SafetensorsDtype::BOOL;
    default:
      throw Error(std::string("safetensors cannot store dtype ") + c10::toString(type) +
                  "; convert the tensor to a real or integer dtype first");
  }
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

struct SafetensorsFile::Mapping {
  const uint8_t* data = nullptr;
  size_t size = 0;

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), size);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open safetensors file '" + path + "': " + errno_text());
  auto mapping = std::make_shared<Mapping>();
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    throw IoError("safetensors file '" + path + "' is not a regular file");
  }
  mapping->size = static_cast<size_t>(status.st_size);
  if (mapping->size > 0) {  // mmap rejects length 0; the header check reports the empty file
    void* data = ::mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const std::string reason = errno_text();
      ::close(fd);
      throw IoError("cannot map safetensors file '" + path + "': " + reason);
    }
    mapping->data = static_cast<const uint8_t*>(data);
  }
  ::close(fd);  // the mapping stays valid without the descriptor

  SafetensorsFile file;
  file.path_ = path;
  file.header_ = parse_safetensors_header(mapping->data, mapping->size, path);
  file.mapping_ = std::move(mapping);
  for (size_t i = 0; i < file.header_.tensors.size(); ++i) {
    file.index_by_name_[file.header_.tensors[i].name] = i;
  }
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto& [name, index] : index_by_name_) names.push_back(name);
  return names;
}

bool SafetensorsFile::contains(const std::string& name) const {
  return index_by_name_.count(name) > 0;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto found = index_by_name_.find(name);
  if (found == index_by_name_.end()) {
    throw Error("safetensors file '" + path_ + "' has no tensor named '" + name + "' (it has " +
                std::to_string(index_by_name_.size()) + " tensors)");
  }
  return header_.tensors[found->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensorInfo& info = this->info(name);
  std::optional<at::ScalarType> type = torch_type_of(info.dtype);
  if (!type) {
    throw FormatError("safetensors file '" + path_ + "': tensor '" + name + "' has dtype " +
                      safetensors_dtype_name(info.dtype) +
                      ", which LibTorch cannot represent; convert the checkpoint first");
  }
  const auto options = at::TensorOptions().dtype(*type);
  if (info.nbytes() == 0) return at::empty(info.shape, options);

  const uint8_t* bytes = mapping_->data + header_.data_offset + info.data_begin;
  // Files from our writer (and the reference one) align every tensor to its item size; copy
  // the rare tensor that is not, rather than hand kernels a misaligned pointer.
  if (reinterpret_cast<uintptr_t>(bytes) % safetensors_dtype_size(info.dtype) != 0) {
    at::Tensor copy = at::empty(info.shape, options);
    std::memcpy(copy.data_ptr(), bytes, info.nbytes());
    return copy;
  }
  std::shared_ptr<const Mapping> keep_alive = mapping_;
  return at::from_blob(
      const_cast<uint8_t*>(bytes), info.shape, [keep_alive](void*) {}, options);
}

// ---------------------------------------------------------------------------------------------
// Writing

FileChecksum save_safetensors(const std::string& path, const NamedTensors& tensors,
                              const SafetensorsMetadata& metadata) {
  check_savable(tensors);

  // Largest item size first (then by name), as the reference writer does: with the header
  // padded to 8 bytes, every tensor then starts aligned to its item size.
  std::vector<const std::pair<std::string, at::Tensor>*> order;
  for (const auto& entry : tensors) order.push_back(&entry);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const size_t a_size = a->second.element_size(), b_size = b->second.element_size();
    if (a_size != b_size) return a_size > b_size;
    return a->first < b->first;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* entry : order) {
    const at::Tensor& tensor = entry->second;
    const uint64_t end = offset + nbytes_of(tensor);
    header[entry->first] = {
        {"dtype", safetensors_dtype_name(to_safetensors_dtype(tensor.scalar_type()))},
        {"shape", tensor.sizes().vec()},
        {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error("cannot save '" + path + "': a tensor name or metadata entry is not valid " +
                "UTF-8 (" + e.what() + ")");
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  AtomicFile file(path);
  FileChecksum sum;
  const auto write = [&](const void* data, size_t size) {
    sum.crc32 = crc32(data, size, sum.crc32);
    sum.bytes += size;
    file.write(data, size);
  };
  file.reserve(sizeof(uint64_t) + header_text.size() + offset);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(header_text.size() >> (8 * i));
  write(length, sizeof(length));
  write(header_text.data(), header_text.size());
  for (const auto* entry : order) {
    // One tensor made contiguous at a time, so a non-contiguous state dict is never copied
    // whole. resolve_neg() materializes a lazily negated view (its raw bytes are not negated).
    const at::Tensor contiguous = entry->second.resolve_neg().contiguous();
    write(contiguous.data_ptr(), nbytes_of(contiguous));
  }
  file.commit();
  return sum;
}

void save_sharded_safetensors(const std::string& dir, const NamedTensors& tensors,
                              uint64_t max_shard_bytes, const SafetensorsMetadata& metadata) {
  if (max_shard_bytes == 0) throw Error("save_sharded_safetensors: max_shard_bytes must be > 0");
  check_savable(tensors);
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw IoError("cannot create directory '" + dir + "': " + error.message());

  // transformers rejects shards whose metadata lacks a known "format".
  SafetensorsMetadata shard_metadata = metadata;
  shard_metadata.emplace("format", "pt");

  // transformers' greedy split: keep order, start a new shard when the next tensor would not
  // fit; a tensor larger than the limit ends up alone.
  std::vector<NamedTensors> shards;
  uint64_t shard_bytes = 0;
  for (const auto& entry : tensors) {
    const uint64_t size = nbytes_of(entry.second);
    if (shards.empty() || (shard_bytes + size > max_shard_bytes && !shards.back().empty())) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += size;
  }

  if (shards.size() <= 1) {
    save_safetensors((fs::path(dir) / kSafetensorsSingleFile).string(),
                     shards.empty() ? NamedTensors{} : shards[0], shard_metadata);
    remove_stale_files(dir, {kSafetensorsSingleFile});
    return;
  }

  json weight_map = json::object();
  uint64_t total_size = 0;
  std::set<std::string> written = {kSafetensorsIndexFile};
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shard_file_name(i, shards.size());
    save_safetensors((fs::path(dir) / file).string(), shards[i], shard_metadata);
    for (const auto& [name, tensor] : shards[i]) {
      weight_map[name] = file;
      total_size += nbytes_of(tensor);
    }
    written.insert(file);
  }
  // The index goes last: until it is replaced, readers see the previous complete index.
  const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const std::string index_text = index.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
  write_file_atomically((fs::path(dir) / kSafetensorsIndexFile).string(), index_text);
  remove_stale_files(dir, written);
}

// ---------------------------------------------------------------------------------------------
// ShardedSafetensors

ShardedSafetensors ShardedSafetensors::open(const std::string& dir) {
  ShardedSafetensors checkpoint;
  checkpoint.dir_ = dir;
  const fs::path index_path = fs::path(dir) / kSafetensorsIndexFile;
  const fs::path single_path = fs::path(dir) / kSafetensorsSingleFile;

  if (!file_exists(index_path)) {
    if (!file_exists(single_path)) {
      throw IoError("'" + dir + "' holds neither " + kSafetensorsIndexFile + " nor " +
                    kSafetensorsSingleFile + "; is it a safetensors checkpoint directory?");
    }
    SafetensorsFile file = SafetensorsFile::open(single_path.string());
    for (const std::string& name : file.names()) {
      checkpoint.weight_map_[name] = kSafetensorsSingleFile;
    }
    checkpoint.files_.emplace(kSafetensorsSingleFile, std::move(file));
    return checkpoint;
  }

  const std::string index_name = index_path.string();
  const json index = read_index(index_name);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw FormatError("index file '" + index_name + "' has no \"weight_map\" object");
  }
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      throw FormatError("index file '" + index_name + "': tensor '" + name + "' maps to a " +
                        file.type_name() + " instead of a file name");
    }
    const std::string file_name = file.get<std::string>();
    // Shards live next to the index; anything else (a path, "..") is refused.
    if (file_name.empty() || file_name == "." || file_name == ".." ||
        file_name.find('/') != std::string::npos) {
      throw FormatError("index file '" + index_name + "': tensor '" + name + "' maps to '" +
                        file_name + "', which is not a file name in " + dir);
    }
    checkpoint.weight_map_[name] = file_name;
  }
  for (const auto& [name, file_name] : checkpoint.weight_map_) {
    if (checkpoint.files_.count(file_name)) continue;
    const fs::path shard_path = fs::path(dir) / file_name;
    if (!file_exists(shard_path)) {
      throw FormatError("index file '" + index_name + "' puts tensor '" + name + "' in '" +
                        file_name +
                        "', but that file does not exist; the checkpoint is "
                        "incomplete");
    }
    checkpoint.files_.emplace(file_name, SafetensorsFile::open(shard_path.string()));
  }
  for (const auto& [name, file_name] : checkpoint.weight_map_) {
    if (!checkpoint.files_.at(file_name).contains(name)) {
      throw FormatError("index file '" + index_name + "' puts tensor '" + name + "' in '" +
                        file_name + "', but that file has no such tensor");
    }
  }
  return checkpoint;
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : weight_map_) names.push_back(name);
  return names;
}

bool ShardedSafetensors::contains(const std::string& name) const {
  return weight_map_.count(name) > 0;
}

const std::string& ShardedSafetensors::file_of(const std::string& name) const {
  auto found = weight_map_.find(name);
  if (found == weight_map_.end()) {
    throw Error("safetensors checkpoint '" + dir_ + "' has no tensor named '" + name + "'");
  }
  return found->second;
}

const SafetensorsFile& ShardedSafetensors::file_holding(const std::string& name) const {
  return files_.at(file_of(name));
}

const SafetensorsTensorInfo& ShardedSafetensors::info(const std::string& name) const {
  return file_holding(name).info(name);
}

at::Tensor ShardedSafetensors::tensor(const std::string& name) const {
  return file_holding(name).tensor(name);
}

}  // namespace ooze
