#include "fsdp/hf_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/logging.h"
#include "core/safetensors.h"
#include "models/hf_checkpoint.h"
#include "models/hf_directory.h"
#include "models/model_config.h"
#include "models/peft_adapter.h"
#include "models/transformer.h"

namespace ooze::fsdp {
namespace {

namespace fs = std::filesystem;

std::string shard_file_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

void agree_with_rank0(FullyShardedModule& model, const std::exception_ptr& failure,
                      const fs::path& staging, const std::string& dir) {
  torch::Tensor flag = torch::tensor(
      {static_cast<int64_t>(failure != nullptr)},
      torch::TensorOptions().dtype(torch::kLong).device(model.unit(0).master_shard().device()));
  if (model.world_size() > 1) model.communicator()->broadcast(flag, 0);
  if (flag.item<int64_t>() == 0) return;
  if (model.rank() == 0) {
    std::error_code ec;
    if (!staging.empty()) fs::remove_all(staging, ec);
    std::rethrow_exception(failure);
  }
  throw IoError("export_hf_model: rank 0 could not write the model to '" + dir +
                "' (see its log); nothing was replaced");
}

}  // namespace

void export_hf_model(const std::string& dir, FsdpTransformer& model,
                     const std::string& tokenizer_dir) {
  FullyShardedModule& sharded = model.sharded();
  const models::ModelConfig& config = model.model()->config();
  const at::ScalarType dtype = config.parameter_dtype();
  const bool writer = sharded.rank() == 0;
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  fs::path staging;

  std::exception_ptr failure;
  if (writer) {
    try {
      if (target.empty()) throw IoError("export_hf_model: the output directory is empty");
      models::check_replaceable_model_dir(target, "export_hf_model");
      staging = target.string() + ".tmp." + std::to_string(::getpid());
      std::error_code ec;
      fs::remove_all(staging, ec);  // left by a crashed export of a process with the same pid
      fs::create_directories(staging, ec);
      if (ec) throw IoError("cannot create directory '" + staging.string() + "': " + ec.message());
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_with_rank0(sharded, failure, staging, dir);

  const size_t num_files = sharded.num_units();
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_bytes = 0;
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    FlatParam& flat = sharded.unit(u);
    torch::Tensor full = sharded.gather_full_master(u);
    if (writer) {
      try {
        const std::string file = shard_file_name(u, num_files);
        NamedTensors tensors;
        for (const FlatParamEntry& entry : flat.entries()) {
          tensors.emplace_back(
              entry.name,
              full.narrow(0, entry.offset, entry.numel).view(entry.shape).to(torch::kCPU, dtype));
          weight_map[entry.name] = file;
          total_bytes += static_cast<uint64_t>(entry.numel) * c10::elementSize(dtype);
        }
        save_safetensors((staging / file).string(), tensors, {{"format", "pt"}});  // fsyncs
      } catch (...) {
        failure = std::current_exception();
      }
    }
    full = torch::Tensor();  // this unit is freed before the next is gathered
    agree_with_rank0(sharded, failure, staging, dir);
  }

  if (writer) {
    try {
      models::write_json_file(
          staging / kSafetensorsIndexFile,
          {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}});
      if (!tokenizer_dir.empty() && !fs::exists(fs::path(tokenizer_dir) / "tokenizer.json")) {
        OOZE_LOG(WARN) << "export_hf_model: tokenizer directory '" << tokenizer_dir
                       << "' has no tokenizer.json; copying the tokenizer files it has";
      }
      models::write_model_side_files(staging, config, tokenizer_dir);
      models::fsync_path(staging);
      models::move_into_place(staging, target);
    } catch (const fs::filesystem_error& e) {
      failure = std::make_exception_ptr(
          IoError("export_hf_model: writing '" + target.string() + "' failed: " + e.what()));
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_with_rank0(sharded, failure, staging, dir);
  if (writer) {
    OOZE_LOG(INFO) << "exported " << sharded.num_units() << " units (" << total_bytes
                   << " bytes) as a Hugging Face model to " << target.string();
  }
}

namespace {

// A LoRA model's adapters, its only sharded parameters, gathered whole on rank 0 (they are
// small); the other ranks take part in the gathers and get nothing.
std::map<std::string, torch::Tensor> gather_adapters(FullyShardedModule& sharded) {
  std::map<std::string, torch::Tensor> adapter;
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    const torch::Tensor full = sharded.gather_full_master(u);
    if (sharded.rank() != 0) continue;
    for (const FlatParamEntry& entry : sharded.unit(u).entries()) {
      adapter[entry.name] =
          full.narrow(0, entry.offset, entry.numel).view(entry.shape).cpu().clone();
    }
  }
  return adapter;
}

}  // namespace

void export_peft_adapter(const std::string& dir, FsdpTransformer& model,
                         const models::LoraOptions& lora, const std::string& base_model) {
  FullyShardedModule& sharded = model.sharded();
  const std::map<std::string, torch::Tensor> adapter = gather_adapters(sharded);
  std::exception_ptr failure;
  if (sharded.rank() == 0) {
    try {
      models::save_peft_adapter(dir, lora, adapter, base_model);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_with_rank0(sharded, failure, fs::path(), dir);
}

void export_merged_lora_model(const std::string& dir, FsdpTransformer& model,
                              const models::LoraOptions& lora, const std::string& tokenizer_dir) {
  FullyShardedModule& sharded = model.sharded();
  models::PeftAdapter adapter{lora, gather_adapters(sharded)};
  std::exception_ptr failure;
  if (sharded.rank() == 0) {
    try {
      // A plain fp32 model holding the base, so that each update is added before rounding.
      const models::ModelConfig& config = model.model()->config();
      models::TransformerModel merged(config);
      const auto base = model.model()->named_parameters();
      torch::NoGradGuard no_grad;
      for (auto& item : merged->named_parameters()) {
        item.value().copy_(base[item.key()].detach().to(torch::kCPU, torch::kFloat));
      }
      models::merge_adapter_weights(*merged, adapter);
      models::save_hf_model(dir, config, *merged, tokenizer_dir);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_with_rank0(sharded, failure, fs::path(), dir);
}

}  // namespace ooze::fsdp
