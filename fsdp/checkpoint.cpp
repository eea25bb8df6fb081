#include "fsdp/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/safetensors.h"

namespace ooze::fsdp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFormatName = "ooze-fsdp-checkpoint";
constexpr int kFormatVersion = 1;
constexpr const char* kCpuRngTensor = "rng_state/cpu";
constexpr const char* kCudaRngTensor = "rng_state/cuda";
// The files each rank writes, in the order of the checksum exchange.
constexpr const char* kFileKinds[] = {"model", "optim"};
constexpr int kFilesPerRank = static_cast<int>(std::size(kFileKinds));

std::string rank_file_name(const std::string& kind, int rank) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s_rank%05d.safetensors", kind.c_str(), rank);
  return name;
}

std::string exp_avg_name(const std::string& unit) { return unit + "/exp_avg"; }
std::string exp_avg_sq_name(const std::string& unit) { return unit + "/exp_avg_sq"; }

std::shared_ptr<comm::Communicator> communicator(FullyShardedModule& model) {
  return model.world_size() > 1 ? model.communicator() : nullptr;
}

torch::Device shard_device(FullyShardedModule& model) {
  return model.unit(0).master_shard().device();
}

// Collective tensors live where the shards do (a NCCL group takes only CUDA tensors).
torch::TensorOptions collective_options(FullyShardedModule& model) {
  return torch::TensorOptions().dtype(torch::kLong).device(shard_device(model));
}

// Whether any rank reported failure; a collective.
bool any_rank_failed(FullyShardedModule& model, bool failed) {
  torch::Tensor flag = torch::tensor({static_cast<int64_t>(failed)}, collective_options(model));
  if (auto comm = communicator(model)) comm->all_reduce(flag, comm::ReduceOp::MAX);
  return flag.item<int64_t>() != 0;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open '" + path.string() + "': " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// RNG state

torch::Tensor rng_state(const torch::Device& device) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_rng_state(const torch::Device& device, const torch::Tensor& state) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state.to(torch::kCPU).clone());
}

// ---------------------------------------------------------------------------------------------
// Saving

json unit_json(FlatParam& flat, int64_t optimizer_steps) {
  json parameters = json::array();
  for (const FlatParamEntry& entry : flat.entries()) {
    parameters.push_back({{"name", entry.name},
                          {"shape", entry.shape},
                          {"offset", entry.offset},
                          {"numel", entry.numel}});
  }
  return {{"name", flat.name()},
          {"numel", flat.numel()},
          {"padded_numel", flat.padded_numel()},
          {"shard_numel", flat.shard_numel()},
          {"optimizer_steps", optimizer_steps},
          {"parameters", parameters}};
}

// This rank's two files, written into `staging`; returns their checksums in kFileKinds order.
std::vector<FileChecksum> write_rank_files(const fs::path& staging, FullyShardedModule& model,
                                           ShardedAdamW& optimizer) {
  const int rank = model.rank();
  NamedTensors model_tensors, optim_tensors;
  for (size_t u = 0; u < model.num_units(); ++u) {
    FlatParam& flat = model.unit(u);
    model_tensors.emplace_back(flat.name(), flat.master_shard().detach().to(torch::kCPU));
    optim_tensors.emplace_back(exp_avg_name(flat.name()), optimizer.exp_avg(u).to(torch::kCPU));
    optim_tensors.emplace_back(exp_avg_sq_name(flat.name()),
                               optimizer.exp_avg_sq(u).to(torch::kCPU));
  }
  optim_tensors.emplace_back(kCpuRngTensor, rng_state(torch::kCPU));
  const torch::Device device = shard_device(model);
  if (device.is_cuda()) optim_tensors.emplace_back(kCudaRngTensor, rng_state(device));

  const SafetensorsMetadata metadata = {{"format", kFormatName},
                                        {"rank", std::to_string(rank)},
                                        {"world_size", std::to_string(model.world_size())}};
  std::vector<FileChecksum> sums;
  for (const char* kind : kFileKinds) {
    const fs::path path = staging / rank_file_name(kind, rank);
    sums.push_back(save_safetensors(
        path.string(), std::string(kind) == "model" ? model_tensors : optim_tensors, metadata));
  }
  return sums;
}

// Rank 0, once every rank's files are in `staging`: metadata.json, then the directory rename,
// then the tracker.
void finish_save_on_rank0(const fs::path& root, const fs::path& staging, const fs::path& final_dir,
                          const TrainingProgress& progress, FullyShardedModule& model,
                          ShardedAdamW& optimizer, const torch::Tensor& sums) {
  const int world = model.world_size();
  json units = json::array();
  for (size_t u = 0; u < model.num_units(); ++u) {
    units.push_back(unit_json(model.unit(u), optimizer.steps(u)));
  }
  json files = json::array();
  std::set<std::string> listed = {kCheckpointMetadataFile};
  for (int r = 0; r < world; ++r) {
    for (int k = 0; k < kFilesPerRank; ++k) {
      const int64_t* row = sums.data_ptr<int64_t>() + (r * (1 + 2 * kFilesPerRank));
      const std::string name = rank_file_name(kFileKinds[k], r);
      files.push_back({{"name", name},
                       {"rank", r},
                       {"kind", kFileKinds[k]},
                       {"bytes", row[1 + 2 * k + 1]},
                       {"crc32", row[1 + 2 * k]}});
      listed.insert(name);
    }
  }
  const ShardedAdamWOptions& adam = optimizer.options();
  const json metadata = {{"format", kFormatName},
                         {"version", kFormatVersion},
                         {"world_size", world},
                         {"training_state",
                          {{"iteration", progress.iteration},
                           {"lr_completed_steps", progress.lr_completed_steps},
                           {"consumed_samples", progress.consumed_samples}}},
                         {"optimizer",
                          {{"type", "adamw"},
                           {"beta1", adam.beta1},
                           {"beta2", adam.beta2},
                           {"eps", adam.eps},
                           {"weight_decay", adam.weight_decay}}},
                         {"units", units},
                         {"files", files}};
  write_file_atomically((staging / kCheckpointMetadataFile).string(), metadata.dump(2) + "\n");

  // Files a crashed earlier save of this iteration (at another W) left in the staging dir.
  for (const fs::directory_entry& entry : fs::directory_iterator(staging)) {
    if (!listed.count(entry.path().filename().string())) fs::remove_all(entry.path());
  }
  sync_directory(staging.string());
  // An untracked directory of this iteration is a save that crashed before the tracker.
  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(staging, final_dir);
  // The rename must be durable before the tracker names the new directory.
  sync_directory(root.string());
  write_file_atomically((root / kLatestIterationFile).string(),
                        std::to_string(progress.iteration) + "\n");
}

// ---------------------------------------------------------------------------------------------
// Loading

struct SavedParameter {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
};

struct SavedUnit {
  std::string name;
  int64_t numel = 0, padded_numel = 0, shard_numel = 0, optimizer_steps = 0;
  std::vector<SavedParameter> parameters;
};

struct SavedFile {
  std::string name, kind;
  int rank = 0;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct SavedCheckpoint {
  fs::path dir;
  int world_size = 0;
  TrainingProgress progress;
  ShardedAdamWOptions optimizer;
  std::vector<SavedUnit> units;
  std::vector<SavedFile> files;

  std::string where(const std::string& file) const { return (dir / file).string(); }
  const SavedFile& file(const std::string& kind, int rank) const {
    for (const SavedFile& f : files) {
      if (f.kind == kind && f.rank == rank) return f;
    }
    throw FormatError(where(kCheckpointMetadataFile) + " lists no " + kind + " file of rank " +
                      std::to_string(rank) + "; the checkpoint is incomplete");
  }
};

SavedCheckpoint read_metadata(const fs::path& iteration_dir) {
  SavedCheckpoint saved;
  saved.dir = iteration_dir;
  const fs::path path = iteration_dir / kCheckpointMetadataFile;
  if (!fs::exists(path)) {
    throw FormatError("checkpoint " + iteration_dir.string() + " has no " +
                      kCheckpointMetadataFile +
                      "; it is incomplete (not written by a finished "
                      "save_checkpoint); load another iteration");
  }
  try {
    const json meta = json::parse(read_text(path));
    if (meta.at("format").get<std::string>() != kFormatName ||
        meta.at("version").get<int>() != kFormatVersion) {
      throw FormatError(path.string() + " is not an " + kFormatName + " version " +
                        std::to_string(kFormatVersion) + " checkpoint");
    }
    saved.world_size = meta.at("world_size").get<int>();
    const json& state = meta.at("training_state");
    saved.progress.iteration = state.at("iteration").get<int64_t>();
    saved.progress.lr_completed_steps = state.at("lr_completed_steps").get<int64_t>();
    saved.progress.consumed_samples = state.at("consumed_samples").get<int64_t>();
    const json& adam = meta.at("optimizer");
    saved.optimizer.beta1 = adam.at("beta1").get<double>();
    saved.optimizer.beta2 = adam.at("beta2").get<double>();
    saved.optimizer.eps = adam.at("eps").get<double>();
    saved.optimizer.weight_decay = adam.at("weight_decay").get<double>();
    for (const json& unit : meta.at("units")) {
      SavedUnit u;
      u.name = unit.at("name").get<std::string>();
      u.numel = unit.at("numel").get<int64_t>();
      u.padded_numel = unit.at("padded_numel").get<int64_t>();
      u.shard_numel = unit.at("shard_numel").get<int64_t>();
      u.optimizer_steps = unit.at("optimizer_steps").get<int64_t>();
      for (const json& parameter : unit.at("parameters")) {
        u.parameters.push_back({parameter.at("name").get<std::string>(),
                                parameter.at("shape").get<std::vector<int64_t>>(),
                                parameter.at("offset").get<int64_t>()});
      }
      saved.units.push_back(std::move(u));
    }
    for (const json& file : meta.at("files")) {
      saved.files.push_back({file.at("name").get<std::string>(), file.at("kind").get<std::string>(),
                             file.at("rank").get<int>(), file.at("bytes").get<uint64_t>(),
                             file.at("crc32").get<uint32_t>()});
    }
  } catch (const json::exception& e) {
    throw FormatError(path.string() + " is malformed (" + e.what() +
                      "); the checkpoint cannot be read");
  }
  if (saved.world_size < 1) {
    throw FormatError(path.string() + " records world size " + std::to_string(saved.world_size) +
                      "; it must be at least 1");
  }
  return saved;
}

// Everything that must agree between the saved layout and `model` for a resharded load.
void check_matches_model(const SavedCheckpoint& saved, FullyShardedModule& model) {
  std::vector<std::string> problems;
  const int64_t w = saved.world_size;
  if (saved.units.size() != model.num_units()) {
    problems.push_back("it has " + std::to_string(saved.units.size()) + " units, the model " +
                       std::to_string(model.num_units()));
  }
  for (size_t u = 0; u < std::min(saved.units.size(), model.num_units()); ++u) {
    const SavedUnit& s = saved.units[u];
    const FlatParam& flat = model.unit(u);
    const std::string unit = "unit " + std::to_string(u) + " '" + s.name + "'";
    if (s.name != flat.name()) {
      problems.push_back(unit + ": the model's unit " + std::to_string(u) + " is '" + flat.name() +
                         "'");
      continue;
    }
    if (s.numel != flat.numel()) {
      problems.push_back(unit + " has " + std::to_string(s.numel) + " elements, the model's " +
                         std::to_string(flat.numel()));
    }
    if (s.shard_numel != (s.numel + w - 1) / w || s.padded_numel != s.shard_numel * w) {
      problems.push_back(unit + ": shard size " + std::to_string(s.shard_numel) +
                         " and padded size " + std::to_string(s.padded_numel) + " do not fit " +
                         std::to_string(s.numel) + " elements over world size " +
                         std::to_string(w));
    }
    if (s.parameters.size() != flat.entries().size()) {
      problems.push_back(unit + " has " + std::to_string(s.parameters.size()) +
                         " parameters, the model's " + std::to_string(flat.entries().size()));
      continue;
    }
    for (size_t i = 0; i < s.parameters.size(); ++i) {
      const SavedParameter& p = s.parameters[i];
      const FlatParamEntry& e = flat.entries()[i];
      if (p.name != e.name || p.shape != e.shape || p.offset != e.offset) {
        problems.push_back(unit + ": parameter " + std::to_string(i) + " is '" + p.name + "' " +
                           c10::str(c10::IntArrayRef(p.shape)) + " at offset " +
                           std::to_string(p.offset) + ", the model's is '" + e.name + "' " +
                           c10::str(c10::IntArrayRef(e.shape)) + " at offset " +
                           std::to_string(e.offset));
      }
    }
  }
  for (const SavedFile& f : saved.files) {
    // Only the names save_checkpoint writes: a listed path never leaves the directory.
    if (f.rank < 0 || f.rank >= w || f.name != rank_file_name(f.kind, f.rank)) {
      problems.push_back("file '" + f.name + "' (" + f.kind + ", rank " + std::to_string(f.rank) +
                         ") is not one save_checkpoint writes at world size " + std::to_string(w));
    }
  }
  for (int r = 0; r < w; ++r) {
    for (const char* kind : kFileKinds) {
      bool found = false;
      for (const SavedFile& f : saved.files) found = found || (f.kind == kind && f.rank == r);
      if (!found) {
        problems.push_back("no " + std::string(kind) + " file is listed for rank " +
                           std::to_string(r) + " of world size " + std::to_string(w));
      }
    }
  }
  if (problems.empty()) return;
  std::string message = "checkpoint " + saved.where(kCheckpointMetadataFile) +
                        " does not describe this model (" + std::to_string(problems.size()) +
                        " problem" + (problems.size() == 1 ? "" : "s") + "):";
  for (size_t i = 0; i < problems.size() && i < 40; ++i) message += "\n  " + problems[i];
  if (problems.size() > 40) message += "\n  ...";
  throw FormatError(message + "\nLoad it into the model it was saved from (same config.json).");
}

// Which rank checksums each of `files`: the largest file first, each to the rank with the fewest
// bytes so far, so that the ranks finish together (an optimizer file is twice a model file).
std::vector<int> checksumming_ranks(const std::vector<const SavedFile*>& files, int world) {
  std::vector<size_t> by_size(files.size());
  for (size_t i = 0; i < files.size(); ++i) by_size[i] = i;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return files[a]->bytes > files[b]->bytes; });
  std::vector<uint64_t> load(static_cast<size_t>(world), 0);
  std::vector<int> rank_of(files.size(), 0);
  for (size_t i : by_size) {
    const auto least = std::min_element(load.begin(), load.end());
    rank_of[i] = static_cast<int>(least - load.begin());
    *least += files[i]->bytes;
  }
  return rank_of;
}

// Every one of `files` exists with its recorded size and CRC-32. Sizes are checked by every
// rank; the checksums are spread over the ranks by bytes and the verdicts combined, so every
// byte is read once and every rank throws the same error.
void verify_files(const SavedCheckpoint& saved, const std::vector<const SavedFile*>& files,
                  FullyShardedModule& model) {
  constexpr int64_t kChecksumMismatch = 1, kUnreadable = 2;
  std::vector<std::string> problems;
  std::vector<int64_t> my_verdicts(files.size(), 0);
  const std::vector<int> checksummed_by = checksumming_ranks(files, model.world_size());
  for (size_t i = 0; i < files.size(); ++i) {
    const SavedFile& file = *files[i];
    const std::string path = saved.where(file.name);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      problems.push_back(path + " is missing");
      continue;
    }
    const uint64_t size = fs::file_size(path, ec);
    if (ec || size != file.bytes) {
      problems.push_back(path + " has " + std::to_string(size) + " bytes, metadata.json records " +
                         std::to_string(file.bytes) + " (truncated or replaced)");
      continue;
    }
    if (checksummed_by[i] != model.rank()) continue;
    try {
      if (checksum_file(path).crc32 != file.crc32) my_verdicts[i] = kChecksumMismatch;
    } catch (const IoError&) {
      my_verdicts[i] = kUnreadable;
    }
  }
  torch::Tensor verdicts = torch::tensor(my_verdicts, collective_options(model));
  if (auto comm = communicator(model)) comm->all_reduce(verdicts, comm::ReduceOp::MAX);
  verdicts = verdicts.to(torch::kCPU);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = saved.where(files[i]->name);
    const int64_t verdict = verdicts[static_cast<int64_t>(i)].item<int64_t>();
    if (verdict == kChecksumMismatch) {
      problems.push_back(path +
                         ": checksum mismatch (its CRC-32 differs from the one recorded "
                         "in metadata.json: the file is corrupted)");
    } else if (verdict == kUnreadable) {
      problems.push_back(path + " cannot be read");
    }
  }
  if (problems.empty()) return;
  std::string message = "checkpoint " + saved.dir.string() + " is damaged (" +
                        std::to_string(problems.size()) + " problem" +
                        (problems.size() == 1 ? "" : "s") + "):";
  for (const std::string& problem : problems) message += "\n  " + problem;
  throw FormatError(message + "\nLoad an earlier iteration (CheckpointLoadOptions::iteration).");
}

// The old ranks' files, opened (mapped) on first use.
class OldShards {
 public:
  OldShards(const SavedCheckpoint& saved, std::string kind)
      : saved_(saved), kind_(std::move(kind)) {}

  const SafetensorsFile& file(int rank) {
    auto it = files_.find(rank);
    if (it == files_.end()) {
      const std::string path = saved_.where(saved_.file(kind_, rank).name);
      it = files_.emplace(rank, SafetensorsFile::open(path)).first;
    }
    return it->second;
  }

  // Tensor `name` of old rank `rank`'s file: fp32 with `numel` elements, or FormatError.
  torch::Tensor tensor(int rank, const std::string& name, int64_t numel) {
    const SafetensorsFile& file = this->file(rank);
    if (!file.contains(name)) {
      throw FormatError(file.path() + " has no tensor '" + name + "'; the checkpoint is damaged");
    }
    const SafetensorsTensorInfo& info = file.info(name);
    if (info.dtype != SafetensorsDtype::F32 || info.shape != std::vector<int64_t>{numel}) {
      throw FormatError(file.path() + ": tensor '" + name + "' is " +
                        safetensors_dtype_name(info.dtype) + " " +
                        c10::str(c10::IntArrayRef(info.shape)) + ", expected F32 [" +
                        std::to_string(numel) + "] as metadata.json records");
    }
    return file.tensor(name);
  }

 private:
  const SavedCheckpoint& saved_;
  std::string kind_;
  std::map<int, SafetensorsFile> files_;
};

// Fills `target` (this rank's new shard of unit `flat`) from the old shards: every old rank
// whose valid range overlaps the new shard contributes that overlap; the padding becomes zero.
void reshard_into(torch::Tensor target, const FlatParam& flat, const SavedUnit& saved_unit,
                  int old_world, OldShards& old_shards, const std::string& tensor_name) {
  const int64_t numel = flat.numel(), old_shard = saved_unit.shard_numel;
  const int64_t begin = flat.shard_offset(), end = begin + flat.valid_shard_numel();
  target.narrow(0, end - begin, flat.shard_numel() - (end - begin)).zero_();
  for (int q = 0; q < old_world; ++q) {
    const int64_t old_begin = q * old_shard, old_end = std::min(numel, old_begin + old_shard);
    const int64_t from = std::max(begin, old_begin), to = std::min(end, old_end);
    if (from >= to) continue;
    const torch::Tensor source = old_shards.tensor(q, tensor_name, old_shard);
    target.narrow(0, from - begin, to - from).copy_(source.narrow(0, from - old_begin, to - from));
  }
}

}  // namespace

const OptionFields<CheckpointLoadOptions>& CheckpointLoadOptions::fields() {
  using O = CheckpointLoadOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("checkpoint");
    f.add_optional("ckpt_step", &O::iteration, int64_t{-1},
                   "Load this iteration instead of the newest; -1: the newest.")
        .min(-1);
    f.add("load_rng", &O::load_rng, "Restore each rank's RNG state; --no-load-rng skips it.");
    return f;
  }();
  return fields;
}

std::string checkpoint_iteration_dir(const std::string& dir, int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof(name), "iter_%07lld", static_cast<long long>(iteration));
  return (fs::path(dir) / name).string();
}

std::optional<int64_t> latest_checkpoint_iteration(const std::string& dir) {
  const fs::path tracker = fs::path(dir) / kLatestIterationFile;
  if (!fs::exists(tracker)) return std::nullopt;
  std::string text = read_text(tracker);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  const bool digits = !text.empty() && std::all_of(text.begin(), text.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || text.size() > 18) {
    throw FormatError(tracker.string() + " should hold an iteration number, but holds '" +
                      text.substr(0, 40) + "'; fix or remove it");
  }
  return std::stoll(text);
}

void rewind_checkpoints(const std::string& dir, std::optional<int64_t> iteration) {
  const std::optional<int64_t> latest = latest_checkpoint_iteration(dir);
  if (!latest || (iteration && *latest <= *iteration)) return;
  const fs::path tracker = fs::path(dir) / kLatestIterationFile;
  if (!iteration) {
    fs::remove(tracker);
    sync_directory(dir);
    return;
  }
  if (!fs::exists(checkpoint_iteration_dir(dir, *iteration))) {
    throw IoError("rewind_checkpoints: " + checkpoint_iteration_dir(dir, *iteration) +
                  " does not exist; the tracker keeps naming iteration " + std::to_string(*latest));
  }
  write_file_atomically(tracker.string(), std::to_string(*iteration) + "\n");
}

void save_checkpoint(const std::string& dir, const TrainingProgress& progress,
                     FullyShardedModule& model, ShardedAdamW& optimizer) {
  if (progress.iteration < 0 || progress.iteration > 9999999) {
    throw Error("save_checkpoint: iteration " + std::to_string(progress.iteration) +
                " is out of range [0, 9999999]");
  }
  const fs::path root(dir);
  const fs::path final_dir = checkpoint_iteration_dir(dir, progress.iteration);
  const fs::path staging = final_dir.string() + ".tmp";
  if (latest_checkpoint_iteration(dir) == progress.iteration && fs::exists(final_dir)) {
    throw Error("save_checkpoint: " + final_dir.string() +
                " is the latest checkpoint already; a checkpoint is never overwritten: save "
                "under a later iteration, or remove it first");
  }

  // Every rank writes its own files; failures are reported collectively below.
  std::exception_ptr failure;
  std::vector<FileChecksum> sums(kFilesPerRank);
  try {
    std::error_code ec;
    fs::create_directories(staging, ec);
    if (ec) throw IoError("cannot create '" + staging.string() + "': " + ec.message());
    sums = write_rank_files(staging, model, optimizer);
  } catch (...) {
    failure = std::current_exception();
  }

  // The exchange is also the barrier: rank 0 goes on only once every rank has written.
  const int64_t row_size = 1 + 2 * kFilesPerRank;
  std::vector<int64_t> row = {failure ? 1 : 0};
  for (const FileChecksum& sum : sums) {
    row.push_back(static_cast<int64_t>(sum.crc32));
    row.push_back(static_cast<int64_t>(sum.bytes));
  }
  torch::Tensor all = torch::tensor(row, torch::kLong);
  if (auto comm = communicator(model)) {
    all = torch::empty({model.world_size() * row_size}, collective_options(model));
    comm->all_gather(all, torch::tensor(row, collective_options(model)));
    all = all.to(torch::kCPU).contiguous();
  }
  // A rank that could not write (a full disk, say): every rank has stopped writing, so rank 0
  // removes the staging directory, which gives back what the others wrote. The previous
  // checkpoint stays the latest.
  bool any_failed = false;
  for (int r = 0; r < model.world_size(); ++r) any_failed |= all[r * row_size].item<int64_t>() != 0;
  if (any_failed && model.rank() == 0) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
  }
  if (failure) std::rethrow_exception(failure);
  for (int r = 0; r < model.world_size(); ++r) {
    if (all[r * row_size].item<int64_t>() != 0) {
      throw IoError("save_checkpoint: rank " + std::to_string(r) +
                    " could not write its files of " + staging.string() + " (see its log); " + dir +
                    " still holds the previous checkpoint");
    }
  }

  if (model.rank() == 0) {
    try {
      finish_save_on_rank0(root, staging, final_dir, progress, model, optimizer, all);
    } catch (const fs::filesystem_error& e) {
      failure = std::make_exception_ptr(
          IoError("save_checkpoint: finishing " + final_dir.string() + " failed: " + e.what()));
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const bool failed = any_rank_failed(model, static_cast<bool>(failure));
  if (failure) std::rethrow_exception(failure);
  if (failed) {
    throw IoError("save_checkpoint: rank 0 could not finish " + final_dir.string() +
                  " (see its log); the tracker still names the previous checkpoint");
  }
  if (model.rank() == 0) {
    OOZE_LOG(INFO) << "saved checkpoint " << final_dir.string();
  }
}

TrainingProgress load_checkpoint(const std::string& dir, FullyShardedModule& model,
                                 ShardedAdamW* optimizer, const CheckpointLoadOptions& options) {
  std::optional<int64_t> iteration = options.iteration;
  const bool from_tracker = !iteration;
  if (from_tracker) iteration = latest_checkpoint_iteration(dir);
  if (!iteration) {
    throw IoError("load_checkpoint: " + dir + " has no " + kLatestIterationFile +
                  ", so no complete checkpoint; give the directory save_checkpoint wrote");
  }
  const fs::path iteration_dir = checkpoint_iteration_dir(dir, *iteration);
  if (!fs::is_directory(iteration_dir)) {
    const std::string message = "load_checkpoint: " + iteration_dir.string() + " does not exist";
    if (from_tracker) {
      throw FormatError(message + ", though " + kLatestIterationFile +
                        " names it; the checkpoint directory was removed or renamed");
    }
    throw IoError(message + "; choose an iteration that was saved");
  }
  const SavedCheckpoint saved = read_metadata(iteration_dir);
  check_matches_model(saved, model);

  const bool load_optimizer = optimizer != nullptr;
  std::vector<const SavedFile*> needed;
  for (const SavedFile& file : saved.files) {
    if (file.kind == "model" || (load_optimizer && file.kind == "optim")) needed.push_back(&file);
  }
  verify_files(saved, needed, model);

  if (load_optimizer) {
    const ShardedAdamWOptions& now = optimizer->options();
    if (now.beta1 != saved.optimizer.beta1 || now.beta2 != saved.optimizer.beta2 ||
        now.eps != saved.optimizer.eps || now.weight_decay != saved.optimizer.weight_decay) {
      OOZE_LOG(WARN) << "load_checkpoint: AdamW hyper-parameters differ from the checkpoint's "
                     << "(beta1 " << saved.optimizer.beta1 << ", beta2 " << saved.optimizer.beta2
                     << ", eps " << saved.optimizer.eps << ", weight decay "
                     << saved.optimizer.weight_decay << "); training continues with the new ones";
    }
  }

  torch::NoGradGuard no_grad;
  OldShards model_files(saved, "model"), optim_files(saved, "optim");
  for (size_t u = 0; u < model.num_units(); ++u) {
    FlatParam& flat = model.unit(u);
    const SavedUnit& unit = saved.units[u];
    flat.reshard();  // a gathered copy would be stale
    reshard_into(flat.master_shard(), flat, unit, saved.world_size, model_files, unit.name);
    if (!load_optimizer) continue;
    reshard_into(optimizer->exp_avg(u), flat, unit, saved.world_size, optim_files,
                 exp_avg_name(unit.name));
    reshard_into(optimizer->exp_avg_sq(u), flat, unit, saved.world_size, optim_files,
                 exp_avg_sq_name(unit.name));
    optimizer->set_steps(u, unit.optimizer_steps);
  }

  if (load_optimizer && options.load_rng) {
    const int source_rank = model.rank() % saved.world_size;
    const SafetensorsFile& file = optim_files.file(source_rank);
    const torch::Device device = shard_device(model);
    std::vector<std::pair<std::string, torch::Device>> generators = {{kCpuRngTensor, torch::kCPU}};
    if (device.is_cuda()) generators.emplace_back(kCudaRngTensor, device);
    for (const auto& [name, generator_device] : generators) {
      if (!file.contains(name)) {
        OOZE_LOG(WARN) << "load_checkpoint: " << file.path() << " has no " << name
                       << "; that RNG keeps its current state";
        continue;
      }
      try {
        set_rng_state(generator_device, file.tensor(name));
      } catch (const c10::Error& e) {
        throw FormatError(
            file.path() + ": tensor '" + name + "' is not a valid RNG state for this LibTorch (" +
            e.what_without_backtrace() + "); load with CheckpointLoadOptions::load_rng = false");
      }
    }
  }
  if (model.rank() == 0) {
    OOZE_LOG(INFO) << "loaded checkpoint " << iteration_dir.string() << " (saved at world size "
                   << saved.world_size << ", loaded at " << model.world_size() << ")";
  }
  return saved.progress;
}

}  // namespace ooze::fsdp
