// Mutation fuzzing of the safetensors reader, built with AddressSanitizer (see CMakeLists.txt).
//
// Valid seed files are mutated thousands of times (deterministic seed): bit flips, byte edits,
// truncations, header-length edits, byte splices and structured JSON edits (offsets past the
// end, overlaps, bad dtypes, negative or huge dims, wrong types, missing or extra fields). Each
// input must either parse, and then every tensor's bytes are read in full so ASan catches any
// out-of-bounds range, or be rejected with ooze::FormatError. Any other exception or a crash
// fails. Each input goes through both the in-memory parser (on a heap buffer of the exact size,
// so reading one byte past it is an ASan error) and SafetensorsFile::open on a real file, and the
// two must agree on the verdict and the bytes.
//
// Usage: core_safetensors_fuzz [iterations] [seed]
#include <ATen/Parallel.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/safetensors_header.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

uint64_t get_u64(const std::string& bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

std::string le_u64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// FNV-1a over a byte range; reading every byte is the point.
uint64_t checksum(const uint8_t* bytes, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

// The seeds: files written by our writer, covering every dtype, scalars, empty tensors and
// metadata, plus a hand-assembled one with a dtype LibTorch lacks.
std::vector<std::string> make_seeds(const std::string& dir) {
  at::manual_seed(1);
  const std::vector<ooze::NamedTensors> sets = {
      {{"weight", at::randn({3, 4})}, {"bias", at::randn({4}, at::kDouble)}},
      {{"h", at::randn({2, 3}).to(at::kHalf)},
       {"b", at::randn({5}).to(at::kBFloat16)},
       {"mask", at::rand({7}) > 0.5},
       {"ids", at::randint(0, 1000, {3}, at::kLong)},
       {"i32", at::randint(-5, 5, {2, 2}, at::kInt)},
       {"i16", at::randint(-5, 5, {3}, at::kShort)},
       {"i8", at::randint(-5, 5, {3}, at::kChar)},
       {"u8", at::randint(0, 255, {6}, at::kByte)}},
      {{"scalar", at::scalar_tensor(2.5)}, {"empty", at::empty({0, 3})}, {"x", at::ones({1})}},
      {},
  };
  std::vector<std::string> seeds;
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string path = dir + "/seed" + std::to_string(i) + ".safetensors";
    ooze::save_safetensors(
        path, sets[i],
        i % 2 ? ooze::SafetensorsMetadata{{"format", "pt"}} : ooze::SafetensorsMetadata{});
    seeds.push_back(read_bytes(path));
  }
  const std::string header = R"({"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[4,7]}})";
  seeds.push_back(le_u64(header.size()) + header + "abcdefg");
  return seeds;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t below(size_t bound) { return bound == 0 ? 0 : rng_() % bound; }

  // Returns the mutated input and names the mutation in `kind`.
  std::string mutate(const std::string& seed, std::string& kind) {
    std::string bytes = seed;
    switch (below(8)) {
      case 0: {
        kind = "bit flips";
        const size_t flips = 1 + below(4);
        for (size_t i = 0; i < flips && !bytes.empty(); ++i) {
          bytes[below(bytes.size())] ^= static_cast<char>(1u << below(8));
        }
        break;
      }
      case 1: {
        kind = "byte changes";
        static const char kInteresting[] = {'\0', '\xff', '{', '}', '[', ']', '"', ',',
                                            ':',  '-',    '9', '0', '.', 'e', ' ', '\\'};
        const size_t edits = 1 + below(3);
        for (size_t i = 0; i < edits && !bytes.empty(); ++i) {
          bytes[below(bytes.size())] =
              below(2) ? static_cast<char>(rng_()) : kInteresting[below(sizeof(kInteresting))];
        }
        break;
      }
      case 2: {
        kind = "truncation";
        bytes.resize(truncation_point(bytes));
        break;
      }
      case 3: {
        kind = "header length";
        if (bytes.size() < 8) break;
        const uint64_t length = get_u64(bytes);
        const uint64_t file_size = bytes.size();
        const uint64_t choices[] = {0,
                                    1,
                                    length - 1,
                                    length + 1,
                                    length + 8,
                                    file_size - 8,
                                    file_size - 7,
                                    file_size,
                                    uint64_t{1} << 32,
                                    uint64_t{1} << 63,
                                    ~uint64_t{0},
                                    ooze::kMaxSafetensorsHeaderBytes,
                                    ooze::kMaxSafetensorsHeaderBytes + 1,
                                    rng_()};
        bytes.replace(0, 8, le_u64(choices[below(sizeof(choices) / sizeof(choices[0]))]));
        break;
      }
      case 4: {
        kind = "splice";
        const size_t at = below(bytes.size() + 1);
        if (below(2) && at < bytes.size()) {
          bytes.erase(at, 1 + below(std::min<size_t>(16, bytes.size() - at)));
        } else {
          bytes.insert(at, std::string(1 + below(16), static_cast<char>(rng_())));
        }
        break;
      }
      case 5: {
        kind = "append";
        bytes.append(1 + below(64), static_cast<char>(rng_()));
        break;
      }
      default: {
        kind = "json edit";
        bytes = edit_json(seed, kind);
        break;
      }
    }
    return bytes;
  }

 private:
  // Cuts inside the length field, at the header boundary, inside the header, inside the data.
  size_t truncation_point(const std::string& bytes) {
    const uint64_t header_end = bytes.size() >= 8 ? 8 + get_u64(bytes) : 0;
    switch (below(4)) {
      case 0:
        return below(std::min<size_t>(8, bytes.size()) + 1);
      case 1:
        return std::min<size_t>(bytes.size(), header_end - below(2));
      case 2:
        return 8 + below(std::min<size_t>(header_end, bytes.size()) - 8 + 1);
      default:
        return below(bytes.size() + 1);
    }
  }

  json random_bad_value() {
    const json choices[] = {nullptr,
                            true,
                            -1,
                            -9223372036854775807 - 1,
                            1.5,
                            1e300,
                            "F32",
                            "nope",
                            json::array(),
                            json::object(),
                            {0, 1, 2},
                            {{"x", 1}},
                            std::numeric_limits<uint64_t>::max(),
                            uint64_t{1} << 63,
                            uint64_t{1} << 62,
                            uint64_t{1} << 32,
                            uint64_t{1} << 31,
                            0};
    return choices[below(sizeof(choices) / sizeof(choices[0]))];
  }

  // Structured edits of the header of a valid file; the length field is rewritten to match
  // (most of the time) so the edit reaches the validation that comes after JSON parsing. A
  // stacked second mutation may meet a header that is no longer valid: then nothing changes.
  std::string edit_json(const std::string& seed, std::string& kind) {
    try {
      return edit_valid_json(seed, kind);
    } catch (const json::exception&) {
      kind += " (header not editable, unchanged)";
      return seed;
    }
  }

  std::string edit_valid_json(const std::string& seed, std::string& kind) {
    const uint64_t length = get_u64(seed);
    json header = json::parse(seed.substr(8, length));
    std::string data = seed.substr(8 + length);
    std::vector<std::string> names;
    for (const auto& item : header.items()) {
      if (item.key() != "__metadata__") names.push_back(item.key());
    }
    if (names.empty()) {
      header["t"] = {{"dtype", "U8"}, {"shape", {data.size()}}, {"data_offsets", {0, data.size()}}};
      names.push_back("t");
    }
    const std::string& name = names[below(names.size())];
    json& entry = header[name];
    const std::string& other = names[below(names.size())];
    const uint64_t data_size = data.size();
    static const char* kDtypes[] = {"F32",     "F16", "BF16", "F64",  "I8",  "I16", "I32",
                                    "I64",     "U8",  "BOOL", "U16",  "U32", "U64", "F8_E4M3",
                                    "F8_E5M2", "f32", "",     "F32 ", "C64", "F4"};
    switch (below(14)) {
      case 0:
        kind += ": offsets past end";
        entry["data_offsets"] = {data_size + below(9), data_size + 8 + below(9)};
        break;
      case 1:
        kind += ": overlapping offsets";
        entry["data_offsets"] = header[other]["data_offsets"];
        break;
      case 2:
        kind += ": begin > end";
        entry["data_offsets"] = {entry["data_offsets"][1].get<uint64_t>() + 1,
                                 entry["data_offsets"][0]};
        break;
      case 3:
        kind += ": dtype";
        entry["dtype"] = kDtypes[below(sizeof(kDtypes) / sizeof(kDtypes[0]))];
        break;
      case 4:
        kind += ": negative dim";
        entry["shape"].push_back(-static_cast<int64_t>(below(5)) - 1);
        break;
      case 5: {
        kind += ": huge dims";
        const uint64_t huge[] = {uint64_t{1} << 31,       uint64_t{1} << 32, uint64_t{1} << 62,
                                 (uint64_t{1} << 63) - 1, uint64_t{1} << 63, ~uint64_t{0}};
        entry["shape"] = json::array();
        const size_t dims = 1 + below(4);
        for (size_t i = 0; i < dims; ++i) {
          entry["shape"].push_back(below(3) ? huge[below(6)] : below(2));
        }
        break;
      }
      case 6: {
        kind += ": wrong type";
        static const char* kFields[] = {"dtype", "shape", "data_offsets"};
        entry[kFields[below(3)]] = random_bad_value();
        break;
      }
      case 7:
        kind += ": wrong type in array";
        if (below(2) && !entry["shape"].empty()) {
          entry["shape"][below(entry["shape"].size())] = random_bad_value();
        } else {
          entry["data_offsets"][below(2)] = random_bad_value();
        }
        break;
      case 8: {
        kind += ": missing or extra field";
        static const char* kFields[] = {"dtype", "shape", "data_offsets"};
        if (below(2)) {
          entry.erase(kFields[below(3)]);
        } else {
          entry["extra"] = random_bad_value();
        }
        break;
      }
      case 9:
        kind += ": entry replaced";
        entry = random_bad_value();
        break;
      case 10:
        kind += ": metadata";
        header["__metadata__"] =
            below(2) ? json(random_bad_value()) : json{{"k", random_bad_value()}};
        break;
      case 11:
        kind += ": shape changed";
        if (below(2)) {
          entry["shape"] = json::array();
        } else {
          entry["shape"].push_back(below(4));
        }
        break;
      case 12:
        kind += ": offsets shifted";
        entry["data_offsets"][below(2)] =
            entry["data_offsets"][below(2)].get<uint64_t>() + below(9) - 4;
        break;
      default:
        kind += ": root replaced";
        header = random_bad_value();
        break;
    }
    std::string text = header.dump();
    if (below(2)) text.append(below(8), ' ');
    const uint64_t new_length = below(10) ? text.size() : text.size() + below(5) - 2;
    return le_u64(new_length) + text + data;
  }

  std::mt19937_64 rng_;
};

struct Verdict {
  bool accepted = false;
  std::vector<uint64_t> checksums;  // per tensor, by name, when accepted
};

// The torch-free parser on a heap buffer of exactly the input's size.
Verdict check_in_memory(const std::string& input) {
  std::vector<uint8_t> exact(input.begin(), input.end());
  Verdict verdict;
  try {
    ooze::SafetensorsHeader header =
        ooze::parse_safetensors_header(exact.data(), exact.size(), "fuzz-input");
    verdict.accepted = true;
    for (const ooze::SafetensorsTensorInfo& info : header.tensors) {
      verdict.checksums.push_back(
          checksum(exact.data() + header.data_offset + info.data_begin, info.nbytes()));
    }
  } catch (const ooze::FormatError&) {
  }
  return verdict;
}

bool has_torch_type(ooze::SafetensorsDtype dtype) {
  try {
    ooze::to_scalar_type(dtype);
    return true;
  } catch (const ooze::FormatError&) {
    return false;
  }
}

// The mmap path: open the file, materialize every tensor LibTorch can represent.
Verdict check_file(const std::string& input, const std::string& path) {
  write_bytes(path, input);
  Verdict verdict;
  try {
    ooze::SafetensorsFile file = ooze::SafetensorsFile::open(path);
    verdict.accepted = true;
    for (const std::string& name : file.names()) {
      const ooze::SafetensorsTensorInfo& info = file.info(name);
      uint64_t sum = 0;
      try {
        at::Tensor tensor = file.tensor(name);
        if (static_cast<uint64_t>(tensor.numel()) * tensor.element_size() != info.nbytes()) {
          throw std::runtime_error("tensor '" + name + "' has the wrong size");
        }
        sum = checksum(static_cast<const uint8_t*>(tensor.data_ptr()), info.nbytes());
      } catch (const ooze::FormatError&) {
        // Only dtypes without a LibTorch equivalent may fail here; checksum the raw bytes
        // through the in-memory path instead.
        if (has_torch_type(info.dtype)) throw;
        sum = checksum(
            reinterpret_cast<const uint8_t*>(input.data()) + 8 + get_u64(input) + info.data_begin,
            info.nbytes());
      }
      verdict.checksums.push_back(sum);
    }
  } catch (const ooze::FormatError&) {
  }
  return verdict;
}

std::string hex_prefix(const std::string& bytes) {
  std::string text;
  char buffer[4];
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 256); ++i) {
    std::snprintf(buffer, sizeof(buffer), "%02x", static_cast<uint8_t>(bytes[i]));
    text += buffer;
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::stol(argv[1]) : 6000;
  const uint64_t seed = argc > 2 ? std::stoull(argv[2]) : 20240611;
  at::set_num_threads(1);

  const fs::path dir =
      fs::temp_directory_path() / ("ooze_safetensors_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file_path = (dir / "input.safetensors").string();
  const auto start = std::chrono::steady_clock::now();

  int status = 0;
  long accepted = 0;
  long checked = 0;
  try {
    const std::vector<std::string> seeds = make_seeds(dir.string());
    Mutator mutator(seed);
    std::vector<std::pair<std::string, std::string>> inputs;  // (kind, bytes)
    // Every seed as is (must parse), and truncated at every single length.
    for (const std::string& bytes : seeds) {
      inputs.emplace_back("seed", bytes);
      for (size_t size = 0; size < bytes.size(); ++size) {
        inputs.emplace_back("truncated to " + std::to_string(size), bytes.substr(0, size));
      }
    }
    for (long i = 0; i < iterations; ++i) {
      std::string kind;
      std::string bytes = mutator.mutate(seeds[mutator.below(seeds.size())], kind);
      // Stack a second mutation now and then to get past the first check that fails.
      if (mutator.below(4) == 0) {
        std::string second;
        bytes = mutator.mutate(
            bytes.size() >= 8 && bytes.size() >= 8 + get_u64(bytes) && get_u64(bytes) < 1'000'000
                ? bytes
                : seeds[0],
            second);
        kind += " + " + second;
      }
      inputs.emplace_back(kind, std::move(bytes));
    }

    for (const auto& [kind, bytes] : inputs) {
      try {
        const Verdict in_memory = check_in_memory(bytes);
        const Verdict from_file = check_file(bytes, file_path);
        if (in_memory.accepted != from_file.accepted ||
            in_memory.checksums != from_file.checksums) {
          throw std::runtime_error("the in-memory parser and the mmap reader disagree");
        }
        if (kind == "seed" && !in_memory.accepted) {
          throw std::runtime_error("a valid seed was rejected");
        }
        accepted += in_memory.accepted;
        ++checked;
      } catch (const std::exception& e) {
        const std::string saved = (fs::temp_directory_path() /
                                   ("ooze_safetensors_fuzz_failure_" + std::to_string(checked)))
                                      .string();
        write_bytes(saved, bytes);
        std::cerr << "FAIL input " << checked << " (" << kind << "): " << e.what()
                  << "\n  saved to " << saved << "\n  first bytes: " << hex_prefix(bytes) << "\n";
        status = 1;
        break;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "FAIL setting up: " << e.what() << "\n";
    status = 1;
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "safetensors fuzz: " << checked << " inputs (" << iterations
            << " mutations + seeds and their truncations), " << accepted << " accepted, "
            << checked - accepted << " rejected with FormatError, " << seconds << " s\n";
  // Mutations that all fail the first check would test little: demand some that parse.
  if (status == 0 && accepted < checked / 50) {
    std::cerr << "FAIL too few inputs parsed (" << accepted << "); the mutator is too blunt\n";
    status = 1;
  }
  return status;
}
