#include "rollout/prompt_source.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "core/atomic_file.h"
#include "core/config.h"
#include "core/error.h"

namespace ooze::rollout {
namespace {

using nlohmann::json;

constexpr int64_t kStateFormat = 1;
constexpr const char* kStateFile = "prompt_source.json";

// Python's `random` module: MT19937 seeded by init_by_array with the seed's 32-bit words, and
// shuffle() drawing each index by rejection from getrandbits. Reproducing it keeps ooze's epoch
// order equal to Slime's (random.seed(seed + epoch); random.shuffle(range(n))).
class PythonRandom {
 public:
  explicit PythonRandom(int64_t seed) {
    // random.seed(int) uses abs(seed), split into 32-bit words, least significant first.
    uint64_t magnitude = seed < 0 ? 0 - static_cast<uint64_t>(seed) : static_cast<uint64_t>(seed);
    std::array<uint32_t, 2> key{};
    size_t key_length = 0;
    do {
      key[key_length++] = static_cast<uint32_t>(magnitude & 0xffffffffu);
      magnitude >>= 32;
    } while (magnitude != 0);
    init_by_array(key.data(), key_length);
  }

  // random.shuffle(values).
  void shuffle(std::vector<int64_t>& values) {
    for (size_t i = values.size(); i-- > 1;) {
      std::swap(values[i], values[below(static_cast<uint32_t>(i + 1))]);
    }
  }

 private:
  static constexpr int kN = 624;
  static constexpr int kM = 397;

  void init_genrand(uint32_t seed) {
    state_[0] = seed;
    for (int i = 1; i < kN; ++i) {
      state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
    }
    index_ = kN;
  }

  void init_by_array(const uint32_t* key, size_t length) {
    init_genrand(19650218u);
    int i = 1;
    size_t j = 0;
    for (size_t k = std::max<size_t>(kN, length); k > 0; --k) {
      state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] +
                  static_cast<uint32_t>(j);
      ++i;
      ++j;
      if (i >= kN) {
        state_[0] = state_[kN - 1];
        i = 1;
      }
      if (j >= length) j = 0;
    }
    for (int k = kN - 1; k > 0; --k) {
      state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) -
                  static_cast<uint32_t>(i);
      ++i;
      if (i >= kN) {
        state_[0] = state_[kN - 1];
        i = 1;
      }
    }
    state_[0] = 0x80000000u;
  }

  uint32_t next32() {
    if (index_ >= kN) {
      for (int k = 0; k < kN; ++k) {
        const uint32_t y = (state_[k] & 0x80000000u) | (state_[(k + 1) % kN] & 0x7fffffffu);
        state_[k] = state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
      }
      index_ = 0;
    }
    uint32_t y = state_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  // _randbelow_with_getrandbits(n) for 0 < n < 2^32: getrandbits(n.bit_length()) until < n.
  uint32_t below(uint32_t n) {
    int bits = 0;
    while (bits < 32 && (static_cast<uint64_t>(1) << bits) <= n) ++bits;
    uint32_t value;
    do {
      value = next32() >> (32 - bits);
    } while (value >= n);
    return value;
  }

  std::array<uint32_t, kN> state_{};
  int index_ = kN;
};

const json& state_field(const json& state, const char* key, const std::string& origin) {
  auto it = state.find(key);
  if (it == state.end()) {
    throw FormatError(origin + " has no '" + key + "'; it is not a prompt source state");
  }
  return *it;
}

int64_t state_count(const json& state, const char* key, const std::string& origin) {
  const json& value = state_field(state, key, origin);
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    throw FormatError(origin + ": '" + key + "' must be a non-negative integer, got " +
                      value.dump());
  }
  return value.get<int64_t>();
}

std::string describe_dataset(const json& dataset) {
  return dataset.value("path", std::string("?")) + " [" +
         dataset.value("fingerprint", std::string("?")) + "]";
}

}  // namespace

const OptionFields<PromptSourceOptions>& PromptSourceOptions::fields() {
  using O = PromptSourceOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("data");
    f.add("rollout_shuffle", &O::shuffle, "Shuffle the prompts, anew each epoch.");
    f.add("rollout_seed", &O::seed, "Seed of the shuffle (epoch e uses rollout_seed + e).");
    return f;
  }();
  return fields;
}

Sample make_sample(const DrawnPrompt& drawn, int64_t sample_index) {
  Sample sample;
  sample.group_index = drawn.group_index;
  sample.index = sample_index;
  sample.prompt = drawn.prompt.text;
  sample.tokens = drawn.prompt.tokens;
  sample.label = drawn.prompt.label;
  sample.metadata = drawn.prompt.metadata;
  sample.tools = drawn.prompt.tools;
  return sample;
}

PromptSource::PromptSource(std::shared_ptr<const PromptDataset> dataset,
                           PromptSourceOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_ || dataset_->size() == 0) {
    throw ConfigError("a prompt source needs a dataset with at least one prompt");
  }
  if (dataset_->size() > static_cast<int64_t>(UINT32_MAX)) {
    throw ConfigError("a prompt dataset of " + std::to_string(dataset_->size()) +
                      " prompts is more than the shuffle supports (2^32 - 1)");
  }
  set_epoch(0);
}

std::vector<int64_t> PromptSource::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_->size()));
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) PythonRandom(options_.seed + epoch).shuffle(order);
  return order;
}

void PromptSource::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  order_ = epoch_order(epoch);
}

std::vector<DrawnPrompt> PromptSource::next_batch(int64_t batch_size) {
  if (batch_size < 1) {
    throw std::invalid_argument("next_batch: batch_size must be >= 1, got " +
                                std::to_string(batch_size));
  }
  std::vector<DrawnPrompt> batch;
  batch.reserve(static_cast<size_t>(batch_size));
  while (static_cast<int64_t>(batch.size()) < batch_size) {
    if (offset_ == dataset_->size()) {
      set_epoch(epoch_ + 1);
      offset_ = 0;
    }
    DrawnPrompt drawn;
    drawn.group_index = groups_drawn_++;
    drawn.epoch = epoch_;
    drawn.dataset_index = order_[static_cast<size_t>(offset_++)];
    drawn.prompt = dataset_->at(drawn.dataset_index);
    batch.push_back(std::move(drawn));
  }
  return batch;
}

int64_t PromptSource::take_sample_indices(int64_t count) {
  if (count < 0) {
    throw std::invalid_argument("take_sample_indices: count must be >= 0, got " +
                                std::to_string(count));
  }
  const int64_t first = samples_numbered_;
  samples_numbered_ += count;
  return first;
}

json PromptSource::state() const {
  return json{{"format", kStateFormat},
              {"epoch", epoch_},
              {"offset", offset_},
              {"seed", options_.seed},
              {"shuffle", options_.shuffle},
              {"groups_drawn", groups_drawn_},
              {"samples_numbered", samples_numbered_},
              {"dataset",
               {{"path", dataset_->options().path},
                {"fingerprint", dataset_->fingerprint()},
                {"prompts", dataset_->size()}}}};
}

void PromptSource::restore(const json& state, const std::string& origin) {
  if (!state.is_object()) {
    throw FormatError(origin + " must be a JSON object, got " + std::string(state.type_name()));
  }
  const json& format = state_field(state, "format", origin);
  if (format != kStateFormat) {
    throw FormatError(origin + " has format " + format.dump() + "; this ooze reads format " +
                      std::to_string(kStateFormat));
  }
  const json& dataset = state_field(state, "dataset", origin);
  if (!dataset.is_object() || !dataset.contains("fingerprint") ||
      !dataset["fingerprint"].is_string()) {
    throw FormatError(origin + ": 'dataset' must be an object with a 'fingerprint' string");
  }
  const json& shuffle = state_field(state, "shuffle", origin);
  const json& seed = state_field(state, "seed", origin);
  if (!shuffle.is_boolean()) throw FormatError(origin + ": 'shuffle' must be true or false");
  if (!seed.is_number_integer()) throw FormatError(origin + ": 'seed' must be an integer");
  const int64_t epoch = state_count(state, "epoch", origin);
  const int64_t offset = state_count(state, "offset", origin);
  const int64_t groups = state_count(state, "groups_drawn", origin);
  const int64_t samples = state_count(state, "samples_numbered", origin);

  const std::string here = dataset_->options().path + " [" + dataset_->fingerprint() + "]";
  if (dataset["fingerprint"].get<std::string>() != dataset_->fingerprint()) {
    throw ConfigError(origin + " was made for the prompt data " + describe_dataset(dataset) +
                      ", but this run reads " + here +
                      "; resume with the same file, data keys, chat template and "
                      "--rollout-max-prompt-len, or start a new run");
  }
  if (shuffle.get<bool>() != options_.shuffle) {
    throw ConfigError(origin + " was made with rollout_shuffle = " + shuffle.dump() +
                      ", this run has " + (options_.shuffle ? "true" : "false") +
                      "; resume with the same --rollout-shuffle, or start a new run");
  }
  if (options_.shuffle && seed.get<int64_t>() != options_.seed) {
    throw ConfigError(origin + " was made with rollout_seed = " + seed.dump() + ", this run has " +
                      std::to_string(options_.seed) +
                      "; resume with the same --rollout-seed, or start a new run");
  }
  if (offset > dataset_->size()) {
    throw FormatError(origin + ": offset " + std::to_string(offset) + " is past the " +
                      std::to_string(dataset_->size()) + " prompts of an epoch");
  }
  set_epoch(epoch);
  offset_ = offset;
  groups_drawn_ = groups;
  samples_numbered_ = samples;
}

std::string PromptSource::state_path(const std::string& dir) {
  return (std::filesystem::path(dir) / kStateFile).string();
}

void PromptSource::save(const std::string& dir) const {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw IoError("cannot create directory " + dir + ": " + error.message());
  write_file_atomically(state_path(dir), state().dump(2) + "\n");
}

void PromptSource::load(const std::string& dir) {
  const std::string path = state_path(dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError("cannot open the prompt source state " + path + ": " + std::strerror(errno) +
                  "; was the checkpoint saved with its rollout state?");
  }
  std::ostringstream content;
  content << in.rdbuf();
  json state;
  try {
    state = json::parse(content.str());
  } catch (const json::parse_error& error) {
    throw FormatError("prompt source state " + path + " is not JSON: " + error.what());
  }
  restore(state, path);
}

int64_t num_rollouts(int64_t num_rollout, int64_t num_epoch, int64_t dataset_size,
                     int64_t rollout_batch_size) {
  if (num_rollout > 0) return num_rollout;
  if (num_epoch <= 0) {
    throw ConfigError(
        "the run's length is not set: give --num-rollout (rollout steps) or --num-epoch (passes "
        "over the prompt data)");
  }
  if (rollout_batch_size < 1) {
    throw ConfigError("rollout_batch_size = " + std::to_string(rollout_batch_size) +
                      " must be >= 1");
  }
  const int64_t per_epoch = dataset_size / rollout_batch_size;
  if (per_epoch == 0) {
    throw ConfigError("num_epoch = " + std::to_string(num_epoch) + " gives no rollouts: the " +
                      std::to_string(dataset_size) + " prompts do not fill one rollout batch of " +
                      std::to_string(rollout_batch_size) +
                      "; lower --rollout-batch-size or give --num-rollout");
  }
  return num_epoch * per_epoch;
}

int64_t num_rollouts(const Config& config, int64_t dataset_size, int64_t rollout_batch_size) {
  return num_rollouts(config.get<int64_t>("num_rollout"), config.get<int64_t>("num_epoch"),
                      dataset_size, rollout_batch_size);
}

std::optional<std::string> rollout_epochs_note(const PromptDataset& dataset,
                                               int64_t rollout_batch_size) {
  const int64_t prompts = dataset.size();
  if (rollout_batch_size <= prompts) return std::nullopt;
  std::ostringstream epochs;
  epochs.precision(3);
  epochs << static_cast<double>(rollout_batch_size) / static_cast<double>(prompts);
  const PromptDatasetOptions& options = dataset.options();
  return options.flags.path + " " + options.path + " has " + std::to_string(prompts) +
         " prompts, fewer than --rollout-batch-size " + std::to_string(rollout_batch_size) +
         ": each rollout spans " + epochs.str() +
         " epochs of it, so its prompts repeat within a rollout";
}

void add_prompt_data_fields(ConfigSchema& schema) {
  PromptDatasetOptions::fields().declare(schema);
  PromptSourceOptions::fields().declare(schema);
  schema.section("data");
  schema
      .add_int("num_epoch", 0,
               "Passes over the prompt data; gives num_rollout = num_epoch * prompts / "
               "rollout_batch_size when num_rollout is 0.")
      .min(0);
  schema.add_int("num_rollout", 0, "Rollout steps of the run; 0: from num_epoch.").min(0);
}

}  // namespace ooze::rollout
