// Writing a Hugging Face model directory safely, shared by models::save_hf_model (one process
// holds the model) and fsdp::export_hf_model (rank 0 writes what the ranks gather): everything
// goes into a staging sibling that replaces the target only when complete.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "models/model_config.h"

namespace ooze::models {

// fsync of a file or directory (a file system that cannot sync directories is tolerated).
void fsync_path(const std::filesystem::path& path);
// Replaces `path` with `json` (indented) atomically and durably; throws ooze::IoError.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& json);
// An existing `target` may be replaced only if it is a model directory (with config.json), a
// PEFT adapter directory (adapter_config.json) or empty, so that a mistyped output path never
// deletes someone's files. Throws ooze::IoError naming `what` (the operation) otherwise.
void check_replaceable_model_dir(const std::filesystem::path& target, const std::string& what);
// config.json, generation_config.json and the tokenizer files present in `tokenizer_dir`
// ("" copies none), each synced.
void write_model_side_files(const std::filesystem::path& dir, const ModelConfig& config,
                            const std::string& tokenizer_dir);
// The complete `staging` directory takes the place of `target`; a previous model survives
// under a temporary name until the new one is in place.
void move_into_place(const std::filesystem::path& staging, const std::filesystem::path& target);

}  // namespace ooze::models
