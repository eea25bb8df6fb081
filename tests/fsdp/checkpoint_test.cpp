// Sharded checkpoints (fsdp/checkpoint.h) across real rank processes (tests/fsdp/fsdp_worker.cpp)
// on loopback with Gloo: a run saved at W = 2 and resumed at W = 1, 2 and 4 continues exactly
// as the uninterrupted run; a save interrupted by a dying rank leaves the previous checkpoint
// the latest; a save or HF export that runs out of disk leaves the previous one whole and says
// what it needed; damaged checkpoints are refused, naming the file and the problem.
#include "fsdp/checkpoint.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/hf_export.h"
#include "fsdp/sharded_adamw.h"
#include "tests/fsdp/worker_launcher.h"
#include "tests/support/file_size_limit.h"
#include "tests/support/process.h"
#include "tests/support/training_fixture.h"

namespace checkpoint_test {

namespace fs = std::filesystem;
using namespace ooze::fsdp_test;
using std::chrono::milliseconds;

// Every resumed run must match the uninterrupted one to fp32 rounding: parameters within this,
// losses within this relative to their value.
const double kTolerance = 3e-8;
// The peak of the worker's warmup + cosine schedule (checkpoint_schedule in fsdp_worker.cpp).
// AdamW turns a rounding-level change of a gradient element near eps into up to ~0.5% of lr
// per step (tests/fsdp/multi_rank_test.cpp), and W = 1 or 4 sum gradients in another order
// than W = 2: at 2e-6 that is ~1e-8 per step, inside the bar; at 1e-3 it would be ~5e-6.
const char* kPeakLr = "2e-6";

struct Outcome {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, std::string> metadata;
  std::vector<double> losses() const {
    std::vector<double> values;
    for (int i = 0; metadata.count("loss_" + std::to_string(i)); ++i) {
      values.push_back(std::stod(metadata.at("loss_" + std::to_string(i))));
    }
    return values;
  }
  // The tensors named PREFIX + parameter name, by parameter name.
  std::map<std::string, torch::Tensor> parameters(const std::string& prefix = "") const {
    std::map<std::string, torch::Tensor> out;
    for (const auto& [name, tensor] : tensors) {
      if (name == "rng_draws") continue;
      if (prefix.empty() && name.find('/') != std::string::npos) continue;
      if (name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = tensor;
    }
    return out;
  }
};

Outcome read_outcome(const std::string& dir, const std::string& name) {
  const ooze::SafetensorsFile file = ooze::SafetensorsFile::open(dir + "/" + name + ".safetensors");
  Outcome outcome;
  for (const std::string& tensor : file.names())
    outcome.tensors[tensor] = file.tensor(tensor).clone();
  outcome.metadata = file.metadata();
  return outcome;
}

double max_difference(const std::map<std::string, torch::Tensor>& got,
                      const std::map<std::string, torch::Tensor>& want) {
  EXPECT_EQ(got.size(), want.size());
  EXPECT_FALSE(want.empty());
  double worst = 0.0;
  for (const auto& [name, tensor] : want) {
    if (!got.count(name)) {
      ADD_FAILURE() << "missing parameter " << name;
      continue;
    }
    const torch::Tensor diff = got.at(name).to(torch::kDouble) - tensor.to(torch::kDouble);
    worst = std::max(worst, diff.abs().max().item<double>());
  }
  return worst;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// What the worker's checkpoint runs save, as metadata.json must describe it: the units of the
// untied tiny model, each parameter at the running offset, shards of ceil(numel / W).
void expect_metadata_describes_model(const std::string& iteration_dir, int world) {
  const nlohmann::json meta = nlohmann::json::parse(read_file(iteration_dir + "/metadata.json"));
  EXPECT_EQ(meta.at("world_size").get<int>(), world);
  auto model = make_model(false);
  const auto prefixes = ooze::fsdp::FsdpTransformer::unit_prefixes(model->config());
  const nlohmann::json& units = meta.at("units");
  ASSERT_EQ(units.size(), prefixes.size() + 1);  // + the root
  int64_t total = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const nlohmann::json& unit = units[u];
    int64_t offset = 0;
    for (const nlohmann::json& parameter : unit.at("parameters")) {
      const std::string name = parameter.at("name").get<std::string>();
      if (u < prefixes.size()) {
        EXPECT_EQ(name.rfind(prefixes[u] + ".", 0), 0u) << name;
      }
      EXPECT_EQ(parameter.at("offset").get<int64_t>(), offset) << name;
      int64_t numel = 1;
      for (int64_t size : parameter.at("shape").get<std::vector<int64_t>>()) numel *= size;
      offset += numel;
    }
    const int64_t numel = unit.at("numel").get<int64_t>();
    EXPECT_EQ(numel, offset);
    EXPECT_EQ(unit.at("shard_numel").get<int64_t>(), (numel + world - 1) / world);
    EXPECT_EQ(unit.at("padded_numel").get<int64_t>(),
              unit.at("shard_numel").get<int64_t>() * world);
    total += numel;
  }
  EXPECT_EQ(total, model->config().num_parameters());
  EXPECT_EQ(meta.at("files").size(), static_cast<size_t>(2 * world));
  for (const nlohmann::json& file : meta.at("files")) {
    EXPECT_TRUE(fs::exists(iteration_dir + "/" + file.at("name").get<std::string>()));
    EXPECT_EQ(file.at("bytes").get<uint64_t>(),
              fs::file_size(iteration_dir + "/" + file.at("name").get<std::string>()));
  }
}

// The resumed runs of `subject` ("" for the tiny transformer, "toy_" for the toy network)
// against its uninterrupted run.
void expect_resumed_as_uninterrupted(const std::string& dir, const std::string& subject) {
  ASSERT_TRUE(fs::exists(dir + "/" + subject + "base.safetensors"));
  const Outcome base = read_outcome(dir, subject + "base");
  const auto want = base.parameters();
  const std::vector<double> want_losses = base.losses();
  ASSERT_EQ(want_losses.size(), 3u);
  // The continuation moved the weights far more than the tolerance: the comparison means
  // something.
  const double moved = max_difference(base.parameters("saved/"), want);
  std::printf("%s: the 3 steps after the save moved the weights by up to %.3g\n",
              subject.empty() ? "transformer" : "toy", moved);
  EXPECT_GT(moved, 30 * kTolerance);

  for (int world : {1, 2, 4}) {
    const std::string name = subject + "resume_w" + std::to_string(world);
    SCOPED_TRACE(name);
    ASSERT_TRUE(fs::exists(dir + "/" + name + ".safetensors"));
    const Outcome got = read_outcome(dir, name);
    EXPECT_EQ(got.metadata.at("iteration"), "3");
    EXPECT_EQ(got.metadata.at("lr_completed_steps"), "3");
    EXPECT_EQ(got.metadata.at("consumed_samples"), std::to_string(3 * kGlobalSequences));
    const double diff = max_difference(got.parameters(), want);
    std::printf("%s: saved at W=2, resumed at W=%d: max |param - uninterrupted| = %.3g\n",
                name.c_str(), world, diff);
    if (world == 2) {
      EXPECT_EQ(diff, 0.0) << "the same W must continue bit for bit";
    } else {
      EXPECT_LE(diff, kTolerance);
    }
    const std::vector<double> losses = got.losses();
    ASSERT_EQ(losses.size(), want_losses.size());
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], want_losses[i], kTolerance * want_losses[i]) << "step " << 3 + i;
    }
    // Rank r continues old rank r mod 2's random stream.
    const torch::Tensor draws = got.tensors.at("rng_draws"), saved = base.tensors.at("rng_draws");
    ASSERT_EQ(draws.size(0), world);
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(torch::equal(draws[r], saved[r % 2])) << "RNG state of rank " << r;
    }
  }
  // Control: without the AdamW state the continuation differs by far more than the tolerance.
  const double without_optimizer =
      max_difference(read_outcome(dir, subject + "resume_w2_weights_only").parameters(), want);
  std::printf("%sresume_w2_weights_only: max |param - uninterrupted| = %.3g\n", subject.c_str(),
              without_optimizer);
  EXPECT_GT(without_optimizer, 10 * kTolerance);
}

TEST(FsdpCheckpoint, ResumesAtAnyWorldSizeAsIfUninterrupted) {
  at::set_num_threads(1);
  const std::string dir = ooze::testing::make_temp_dir("fsdp-ckpt-resume");
  const std::string lr = std::string(",lr=") + kPeakLr;
  const std::string transformer = ",dir=" + dir + "/ckpt" + lr;
  // The toy's units do not divide by 2 or 4: its shards have padding at both world sizes.
  const std::string toy = ",model=toy,dir=" + dir + "/toy_ckpt" + lr;
  // 3 steps, save (iteration 3), 3 more steps: the uninterrupted runs.
  const std::string save = ",mode=ckpt_save,steps=3,more=3";
  launch_workers_expecting_success(
      2, {"name=base" + save + transformer, "name=toy_base" + save + toy}, dir);
  const std::string ckpt = dir + "/ckpt";
  EXPECT_EQ(read_file(ckpt + "/latest_checkpointed_iteration.txt"), "3\n");
  EXPECT_TRUE(fs::is_directory(ckpt + "/iter_0000003"));
  EXPECT_FALSE(fs::exists(ckpt + "/iter_0000003.tmp"));
  expect_metadata_describes_model(ckpt + "/iter_0000003", 2);

  // The same 3 steps resumed from the checkpoints at W = 1, 2 and 4.
  const std::string resume = ",mode=ckpt_resume,steps=3";
  for (int world : {1, 2, 4}) {
    const std::string w = std::to_string(world);
    std::vector<std::string> configs = {"name=resume_w" + w + resume + transformer,
                                        "name=toy_resume_w" + w + resume + toy};
    if (world == 2) {
      configs.push_back("name=resume_w2_weights_only,optim=0" + resume + transformer);
      configs.push_back("name=toy_resume_w2_weights_only,optim=0" + resume + toy);
    }
    launch_workers_expecting_success(world, configs, dir);
  }
  expect_resumed_as_uninterrupted(dir, "");
  expect_resumed_as_uninterrupted(dir, "toy_");
}

// The untied tiny model at W = 1 in this process, its weights from another seed than the saved
// run's, so that a load is visible.
struct LocalTrainer {
  ooze::fsdp::FsdpTransformer model{make_model(false, kInitSeed + 3), nullptr};
  ooze::fsdp::ShardedAdamW optimizer{model.sharded(), ooze::fsdp::ShardedAdamWOptions{}};
  std::map<std::string, torch::Tensor> parameters() {
    return gather_full_parameters(model.sharded());
  }
};

TEST(FsdpCheckpoint, InterruptedSaveLeavesThePreviousCheckpointLatest) {
  at::set_num_threads(1);
  const std::string dir = ooze::testing::make_temp_dir("fsdp-ckpt-crash");
  const std::string ckpt = dir + "/ckpt";
  // Saves iteration 3; then rank 1 dies while rank 0 writes its files of iteration 4.
  const auto ranks = launch_workers(2, {"name=crash,mode=ckpt_crash,dir=" + ckpt}, dir).ranks;
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_TRUE(ranks[0].status.exited && ranks[0].status.code == 0)
      << ranks[0].describe() << ranks[0].log;
  EXPECT_TRUE(ranks[1].status.exited && ranks[1].status.code == 3)
      << ranks[1].describe() << ranks[1].log;

  EXPECT_EQ(read_file(ckpt + "/latest_checkpointed_iteration.txt"), "3\n");
  EXPECT_TRUE(fs::exists(ckpt + "/iter_0000003/metadata.json"));
  EXPECT_FALSE(fs::exists(ckpt + "/iter_0000004"));
  // The interrupted save: rank 0's files, nothing of rank 1, no metadata.
  EXPECT_TRUE(fs::exists(ckpt + "/iter_0000004.tmp/model_rank00000.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt + "/iter_0000004.tmp/model_rank00001.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt + "/iter_0000004.tmp/metadata.json"));
  ASSERT_TRUE(fs::exists(dir + "/crash.safetensors"));
  const auto saved = read_outcome(dir, "crash").parameters("saved/");

  LocalTrainer trainer;
  EXPECT_EQ(ooze::fsdp::latest_checkpoint_iteration(ckpt).value_or(-1), 3);
  EXPECT_EQ(
      ooze::fsdp::load_checkpoint(ckpt, trainer.model.sharded(), &trainer.optimizer).iteration, 3);
  EXPECT_EQ(max_difference(trainer.parameters(), saved), 0.0);

  // A later save of iteration 4 replaces the leftover.
  TrainSettings settings;
  settings.first_step = 3;
  settings.steps = 1;
  train_fsdp(trainer.model, trainer.optimizer, settings);
  ooze::fsdp::save_checkpoint(ckpt, {4, 4, 4 * kGlobalSequences}, trainer.model.sharded(),
                              trainer.optimizer);
  EXPECT_EQ(read_file(ckpt + "/latest_checkpointed_iteration.txt"), "4\n");
  EXPECT_FALSE(fs::exists(ckpt + "/iter_0000004.tmp"));
  expect_metadata_describes_model(ckpt + "/iter_0000004", 1);
  const auto at_four = trainer.parameters();

  // A crash after the directory rename but before the tracker: iteration 4 is complete but
  // untracked, so loads still take 3, and saving 4 again replaces it.
  write_file(ckpt + "/latest_checkpointed_iteration.txt", "3\n");
  LocalTrainer other;
  EXPECT_EQ(ooze::fsdp::load_checkpoint(ckpt, other.model.sharded(), &other.optimizer).iteration,
            3);
  EXPECT_EQ(max_difference(other.parameters(), saved), 0.0);
  ooze::fsdp::save_checkpoint(ckpt, {4, 4, 4 * kGlobalSequences}, trainer.model.sharded(),
                              trainer.optimizer);
  EXPECT_EQ(read_file(ckpt + "/latest_checkpointed_iteration.txt"), "4\n");

  // The tracked checkpoint is never overwritten.
  EXPECT_THROW(ooze::fsdp::save_checkpoint(ckpt, {4, 4, 4 * kGlobalSequences},
                                           other.model.sharded(), other.optimizer),
               ooze::Error);
  LocalTrainer last;
  EXPECT_EQ(ooze::fsdp::load_checkpoint(ckpt, last.model.sharded(), &last.optimizer).iteration, 4);
  EXPECT_EQ(max_difference(last.parameters(), at_four), 0.0);

  // Rewound to 3 (a resumed PPO critic whose checkpoint of 4 belongs to a redone rollout), the
  // directory loads 3 and takes a new save of 4; a rewind to a missing iteration is refused.
  EXPECT_THROW(ooze::fsdp::rewind_checkpoints(ckpt, 2), ooze::IoError);
  EXPECT_EQ(read_file(ckpt + "/latest_checkpointed_iteration.txt"), "4\n");
  ooze::fsdp::rewind_checkpoints(ckpt, 3);
  EXPECT_EQ(ooze::fsdp::latest_checkpoint_iteration(ckpt).value_or(-1), 3);
  ooze::fsdp::save_checkpoint(ckpt, {4, 4, 4 * kGlobalSequences}, other.model.sharded(),
                              other.optimizer);
  EXPECT_EQ(ooze::fsdp::latest_checkpoint_iteration(ckpt).value_or(-1), 4);
  // Rewound to none (a run that starts over), it has no checkpoint, and a save of 4 is taken.
  ooze::fsdp::rewind_checkpoints(ckpt, std::nullopt);
  EXPECT_FALSE(ooze::fsdp::latest_checkpoint_iteration(ckpt).has_value());
  ooze::fsdp::save_checkpoint(ckpt, {4, 4, 4 * kGlobalSequences}, other.model.sharded(),
                              other.optimizer);
  EXPECT_EQ(ooze::fsdp::latest_checkpoint_iteration(ckpt).value_or(-1), 4);
}

// A save or an HF export that runs out of room stops at once with an IoError naming the file,
// the bytes it needed and the space there is, leaves no staging behind, and leaves the previous
// checkpoint the latest and loadable bit for bit.
TEST(FsdpCheckpoint, AFullDiskLeavesThePreviousCheckpointAndSaysWhatWasNeeded) {
  at::set_num_threads(1);
  const std::string ckpt = ooze::testing::make_temp_dir("fsdp-ckpt-full") + "/ckpt";
  LocalTrainer trainer;
  ooze::fsdp::save_checkpoint(ckpt, {1, 1, kGlobalSequences}, trainer.model.sharded(),
                              trainer.optimizer);
  const auto saved = trainer.parameters();
  const auto model_file = fs::path(ckpt) / "iter_0000001" / "model_rank00000.safetensors";
  const uintmax_t model_bytes = fs::file_size(model_file);
  TrainSettings settings;
  settings.first_step = 1;
  settings.steps = 1;
  train_fsdp(trainer.model, trainer.optimizer, settings);

  std::string message;
  {
    ooze::testing::FileSizeLimit limit(model_bytes / 2);
    try {
      ooze::fsdp::save_checkpoint(ckpt, {2, 2, 2 * kGlobalSequences}, trainer.model.sharded(),
                                  trainer.optimizer);
    } catch (const ooze::IoError& e) {
      message = e.what();
    }
  }
  ASSERT_FALSE(message.empty()) << "a save past the file-size limit succeeded";
  for (const std::string& piece :
       {std::string("iter_0000002.tmp/model_rank00000.safetensors"),
        "the file needs " + std::to_string(model_bytes) + " bytes", std::string("File too large"),
        std::string("bytes free on its filesystem")}) {
    EXPECT_NE(message.find(piece), std::string::npos) << "'" << piece << "' is not in: " << message;
  }
  EXPECT_FALSE(fs::exists(ckpt + "/iter_0000002.tmp"));
  EXPECT_FALSE(fs::exists(ckpt + "/iter_0000002"));
  EXPECT_EQ(read_file(ckpt + "/latest_checkpointed_iteration.txt"), "1\n");
  LocalTrainer resumed;
  EXPECT_EQ(
      ooze::fsdp::load_checkpoint(ckpt, resumed.model.sharded(), &resumed.optimizer).iteration, 1);
  EXPECT_EQ(max_difference(resumed.parameters(), saved), 0.0);

  // The same for a Hugging Face export over an earlier one: the earlier stays whole.
  const std::string hf = fs::path(ckpt).parent_path().string() + "/hf";
  ooze::fsdp::export_hf_model(hf, resumed.model, "");
  auto files_of = [&] {
    std::map<std::string, std::string> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(hf)) {
      files[entry.path().filename().string()] = read_file(entry.path().string());
    }
    return files;
  };
  const std::map<std::string, std::string> exported = files_of();
  message.clear();
  {
    ooze::testing::FileSizeLimit limit(64);
    try {
      ooze::fsdp::export_hf_model(hf, trainer.model, "");
    } catch (const ooze::IoError& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find("File too large (the file needs"), std::string::npos) << message;
  EXPECT_EQ(files_of(), exported);
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(hf).parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find("hf.tmp"), std::string::npos)
        << entry.path() << " was left behind";
  }
}

// Loading `ckpt` into `model` at W = 1 throws FormatError whose message contains every piece.
void expect_refused(const std::string& ckpt, ooze::fsdp::FsdpTransformer& model,
                    const std::vector<std::string>& pieces, bool with_optimizer = true) {
  ooze::fsdp::ShardedAdamW optimizer(model.sharded(), ooze::fsdp::ShardedAdamWOptions{});
  try {
    ooze::fsdp::load_checkpoint(ckpt, model.sharded(), with_optimizer ? &optimizer : nullptr);
    ADD_FAILURE() << "loading " << ckpt << " succeeded";
  } catch (const ooze::FormatError& e) {
    for (const std::string& piece : pieces) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos)
          << "'" << piece << "' is not in: " << e.what();
    }
  }
}

std::string damaged_copy(const std::string& ckpt, const std::string& dir, const std::string& name) {
  const std::string copy = dir + "/" + name;
  fs::copy(ckpt, copy, fs::copy_options::recursive);
  return copy;
}

TEST(FsdpCheckpoint, DamagedCheckpointsAreRefusedNamingTheFile) {
  at::set_num_threads(1);
  const std::string dir = ooze::testing::make_temp_dir("fsdp-ckpt-damage");
  const std::string ckpt = dir + "/ckpt";
  launch_workers_expecting_success(2, {"name=small,mode=ckpt_save,steps=1,more=0,dir=" + ckpt},
                                   dir);
  ASSERT_TRUE(fs::exists(ckpt + "/iter_0000001/metadata.json"));
  const std::string iteration = "/iter_0000001/";

  // One flipped byte in the middle of a shard (tensor data: the safetensors header still parses).
  const std::string flipped = damaged_copy(ckpt, dir, "flipped");
  {
    const std::string path = flipped + iteration + "optim_rank00001.safetensors";
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff middle = static_cast<std::streamoff>(fs::file_size(path) / 2);
    file.seekg(middle);
    const char byte = static_cast<char>(file.get() ^ 0x01);
    file.seekp(middle);
    file.put(byte);
  }
  // A deleted shard, a truncated shard, a missing metadata file.
  const std::string deleted = damaged_copy(ckpt, dir, "deleted");
  fs::remove(deleted + iteration + "model_rank00000.safetensors");
  const std::string truncated = damaged_copy(ckpt, dir, "truncated");
  fs::resize_file(truncated + iteration + "model_rank00001.safetensors",
                  fs::file_size(truncated + iteration + "model_rank00001.safetensors") - 8);
  const std::string no_metadata = damaged_copy(ckpt, dir, "no_metadata");
  fs::remove(no_metadata + iteration + "metadata.json");
  // metadata.json of another model shape, and of a world size whose files are not there.
  nlohmann::json meta = nlohmann::json::parse(read_file(ckpt + iteration + "metadata.json"));
  const std::string other_shape = damaged_copy(ckpt, dir, "other_shape");
  {
    nlohmann::json edited = meta;
    edited["units"][1]["parameters"][0]["shape"] = {64, 32};
    write_file(other_shape + iteration + "metadata.json", edited.dump());
  }
  const std::string other_world = damaged_copy(ckpt, dir, "other_world");
  {
    nlohmann::json edited = meta;
    edited["world_size"] = 3;
    write_file(other_world + iteration + "metadata.json", edited.dump());
  }

  {
    ooze::fsdp::FsdpTransformer model(make_model(false), nullptr);
    expect_refused(flipped, model, {"optim_rank00001.safetensors", "checksum mismatch"});
    expect_refused(deleted, model, {"model_rank00000.safetensors", "missing"});
    expect_refused(truncated, model, {"model_rank00001.safetensors", "bytes"});
    expect_refused(no_metadata, model, {"metadata.json", "incomplete"});
    expect_refused(other_shape, model,
                   {"metadata.json", "does not describe this model", "model.layers.0"});
    expect_refused(other_world, model, {"rank 2", "world size 3"});
    // A weights-only load reads, and so checks, only the model files.
    ooze::fsdp::load_checkpoint(flipped, model.sharded(), nullptr);
  }
  {
    // Models of another shape than the saved one.
    ooze::fsdp::FsdpTransformer tied(make_model(true), nullptr);
    expect_refused(ckpt, tied, {"does not describe this model", "units"});
    ooze::models::ModelConfig config = tiny_config(false);
    config.intermediate_size = 96;
    ooze::models::TransformerModel wider(config);
    wider->init_weights(1);
    ooze::fsdp::FsdpTransformer wide(wider, nullptr);
    expect_refused(ckpt, wide, {"model.layers.0.mlp.gate_proj.weight", "[96, 64]"});
  }
  {
    // The tracker names a directory that is gone; no tracker at all.
    ooze::fsdp::FsdpTransformer model(make_model(false), nullptr);
    const std::string gone = damaged_copy(ckpt, dir, "gone");
    fs::remove_all(gone + "/iter_0000001");
    expect_refused(gone, model, {"iter_0000001", "latest_checkpointed_iteration.txt"});
    EXPECT_THROW(ooze::fsdp::load_checkpoint(dir + "/nothing", model.sharded(), nullptr),
                 ooze::IoError);
  }

  // At W = 2 the checksums are split between the ranks (optim_rank00001, the 4th file, is rank
  // 1's to check); both ranks must refuse, naming the file.
  launch_workers_expecting_success(2,
                                   {"name=flipped,mode=ckpt_load_error,dir=" + flipped +
                                        ",expect=optim_rank00001.safetensors: checksum mismatch",
                                    "name=deleted,mode=ckpt_load_error,dir=" + deleted +
                                        ",expect=model_rank00000.safetensors is missing"},
                                   dir);
}

}  // namespace checkpoint_test
