#include "models/hf_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "core/safetensors.h"
#include "core/strings.h"
#include "models/hf_directory.h"

namespace ooze::models {
namespace fs = std::filesystem;
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

bool is_floating(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::F16 || dtype == SafetensorsDtype::BF16 ||
         dtype == SafetensorsDtype::F32 || dtype == SafetensorsDtype::F64;
}

// A checkpoint usually has hundreds of tensors: keep messages readable when nothing matches.
std::string format_problems(const std::vector<std::string>& problems) {
  constexpr size_t kShown = 40;
  std::string text;
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) text += "\n  " + problems[i];
  if (problems.size() > kShown) {
    text += "\n  ... and " + std::to_string(problems.size() - kShown) + " more";
  }
  return text;
}

// The shape and dtype of checkpoint tensor `name` must fit `target`; returns "" when they do.
std::string check_compatible(const ShardedSafetensors& checkpoint, const std::string& name,
                             const at::Tensor& target) {
  const SafetensorsTensorInfo& info = checkpoint.info(name);
  const std::string where = name + " in " + checkpoint.file_of(name);
  if (info.shape != target.sizes().vec()) {
    return "shape mismatch: " + where + " is " + shape_text(info.shape) + " but the model's is " +
           shape_text(target.sizes().vec()) + " (does config.json describe these weights?)";
  }
  const bool target_floating = at::isFloatingType(target.scalar_type());
  if (target_floating ? !is_floating(info.dtype)
                      : to_safetensors_dtype(target.scalar_type()) != info.dtype) {
    return "dtype mismatch: " + where + " is " + safetensors_dtype_name(info.dtype) +
           " but the model's is " + std::string(c10::toString(target.scalar_type())) +
           (target_floating ? " (floating tensors convert: F32, BF16, F16 or F64)" : "");
  }
  return "";
}

void write_model_files(const fs::path& out, const ModelConfig& config, torch::nn::Module& model,
                       const std::string& tokenizer_dir, uint64_t max_shard_bytes) {
  const at::ScalarType dtype = config.parameter_dtype();
  NamedTensors tensors;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    tensors.emplace_back(item.key(), item.value().detach().to(at::kCPU, dtype).contiguous());
  }
  save_sharded_safetensors(out.string(), tensors, max_shard_bytes);  // fsyncs each file
  tensors.clear();

  write_model_side_files(out, config, tokenizer_dir);
  fsync_path(out);
}

// What loading `checkpoint` into `model` would copy, after checking every name, shape and dtype
// (load_hf_weights says what is an error).
struct LoadPlan {
  std::vector<std::pair<std::string, at::Tensor>> copies;  // checkpoint name -> destination
  std::vector<std::string> missing, unexpected;            // errors when strict
  bool tied_head_in_checkpoint = false;
};

LoadPlan plan_load(const torch::nn::Module& model, const ShardedSafetensors& checkpoint,
                   const std::string& dir, bool strict) {
  const auto parameters = model.named_parameters(/*recurse=*/true);
  const auto buffers = model.named_buffers(/*recurse=*/true);

  LoadPlan plan;
  std::vector<std::string> errors;
  for (const auto& item : parameters) {
    if (!checkpoint.contains(item.key())) plan.missing.push_back(item.key());
  }
  for (const std::string& name : checkpoint.names()) {
    const at::Tensor* target = parameters.find(name);
    if (target == nullptr) target = buffers.find(name);
    if (target != nullptr) {
      const std::string problem = check_compatible(checkpoint, name, *target);
      if (problem.empty()) {
        plan.copies.emplace_back(name, *target);
      } else {
        errors.push_back(problem);
      }
    } else if (ends_with(name, "rotary_emb.inv_freq")) {
      continue;
    } else if (name == "lm_head.weight" && parameters.contains("model.embed_tokens.weight")) {
      plan.tied_head_in_checkpoint = true;
    } else {
      plan.unexpected.push_back(name);
    }
  }

  if (strict) {
    for (const std::string& name : plan.missing) {
      errors.push_back("missing: " + name +
                       " (a parameter of the model; no file of the "
                       "checkpoint has it)");
    }
    for (const std::string& name : plan.unexpected) {
      errors.push_back("unexpected: " + name + " in " + checkpoint.file_of(name) +
                       " (the model has no parameter or buffer of that name)");
    }
  }
  if (!errors.empty()) {
    throw FormatError("checkpoint '" + dir + "' does not fit the model (" +
                      std::to_string(errors.size()) + " problem" + (errors.size() == 1 ? "" : "s") +
                      "):" + format_problems(errors) +
                      "\nCheck that config.json belongs to these weights.");
  }
  return plan;
}

}  // namespace

void check_hf_weights(const torch::nn::Module& model, const std::string& dir) {
  plan_load(model, ShardedSafetensors::open(dir), dir, /*strict=*/false);
}

void load_hf_weights(torch::nn::Module& model, const std::string& dir, bool strict) {
  const ShardedSafetensors checkpoint = ShardedSafetensors::open(dir);
  const LoadPlan plan = plan_load(model, checkpoint, dir, strict);
  if (!strict) {
    for (const std::string& name : plan.missing) {
      OOZE_LOG(WARN) << "load_hf_weights: " << name << " is not in checkpoint '" << dir
                     << "'; it keeps its current value";
    }
    for (const std::string& name : plan.unexpected) {
      OOZE_LOG(WARN) << "load_hf_weights: skipping " << name << " of " << checkpoint.file_of(name)
                     << ": the model has no such parameter";
    }
  }

  torch::NoGradGuard no_grad;
  for (const auto& [name, target] : plan.copies) target.copy_(checkpoint.tensor(name));

  if (plan.tied_head_in_checkpoint) {
    const auto parameters = model.named_parameters(/*recurse=*/true);
    // Tied models read the head from the embeddings; a different lm_head.weight would be lost.
    const at::Tensor& embeddings = parameters["model.embed_tokens.weight"];
    const at::Tensor head = checkpoint.tensor("lm_head.weight");
    const bool same = head.sizes() == embeddings.sizes() &&
                      at::equal(head.to(embeddings.device(), embeddings.scalar_type()), embeddings);
    if (!same) {
      const std::string message =
          "checkpoint '" + dir + "': lm_head.weight in " + checkpoint.file_of("lm_head.weight") +
          " differs from model.embed_tokens.weight, but the model ties its embeddings "
          "(tie_word_embeddings true in config.json); set tie_word_embeddings to false to load "
          "an untied head";
      if (strict) throw FormatError(message);
      OOZE_LOG(WARN) << "load_hf_weights: " << message << "; using the embeddings as the head";
    }
  }
}

void save_hf_model(const std::string& dir, const ModelConfig& config, torch::nn::Module& model,
                   const std::string& tokenizer_dir, uint64_t max_shard_bytes) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  if (target.empty()) throw IoError("save_hf_model: the output directory is empty");
  if (!tokenizer_dir.empty() && !fs::exists(fs::path(tokenizer_dir) / "tokenizer.json")) {
    throw Error("save_hf_model: tokenizer directory '" + tokenizer_dir +
                "' has no tokenizer.json; pass the directory of a Hugging Face tokenizer, or "
                "none to save the weights without one");
  }
  check_replaceable_model_dir(target, "save_hf_model");

  const std::string pid = std::to_string(::getpid());
  const fs::path staging = target.string() + ".tmp." + pid;
  std::error_code ec;
  fs::remove_all(staging, ec);  // left by a crashed save of a process with the same pid
  fs::create_directories(staging, ec);
  if (ec) {
    throw IoError("cannot create directory '" + staging.string() + "': " + ec.message());
  }
  try {
    write_model_files(staging, config, model, tokenizer_dir, max_shard_bytes);
    move_into_place(staging, target);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging, ec);
    throw IoError("saving the model to '" + target.string() + "' failed: " + e.what());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

}  // namespace ooze::models
