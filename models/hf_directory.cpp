#include "models/hf_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ooze::models {

namespace fs = std::filesystem;

namespace {

// Files transformers' tokenizers read, copied when present.
const char* const kTokenizerFiles[] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
};

nlohmann::json generation_config_json(const ModelConfig& config) {
  nlohmann::json json = nlohmann::json::object();
  if (config.bos_token_id) json["bos_token_id"] = *config.bos_token_id;
  if (config.eos_token_ids.size() == 1) {
    json["eos_token_id"] = config.eos_token_ids[0];
  } else if (!config.eos_token_ids.empty()) {
    json["eos_token_id"] = config.eos_token_ids;
  }
  return json;
}

}  // namespace

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw IoError("cannot open '" + path.string() + "' to sync it: " + std::strerror(errno));
  }
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0 && !fs::is_directory(path)) {
    throw IoError("fsync of '" + path.string() + "' failed: " + std::strerror(saved));
  }
}

void write_json_file(const fs::path& path, const nlohmann::json& json) {
  write_file_atomically(path.string(), json.dump(2) + "\n");
}

void check_replaceable_model_dir(const fs::path& target, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(target, ec))) return;
  if (!fs::is_directory(fs::symlink_status(target, ec))) {
    throw IoError(what + ": '" + target.string() +
                  "' exists and is not a directory; choose another output path");
  }
  if (!fs::exists(target / "config.json") && !fs::exists(target / "adapter_config.json") &&
      !fs::is_empty(target, ec)) {
    throw IoError(what + ": '" + target.string() +
                  "' is a non-empty directory without config.json or adapter_config.json, so not "
                  "a model or adapter directory this may replace; choose another output path or "
                  "remove it");
  }
}

void write_model_side_files(const fs::path& dir, const ModelConfig& config,
                            const std::string& tokenizer_dir) {
  save_model_config(config, dir.string());  // atomic: fsynced before the rename
  write_json_file(dir / "generation_config.json", generation_config_json(config));
  if (tokenizer_dir.empty()) return;
  for (const char* file : kTokenizerFiles) {
    const fs::path source = fs::path(tokenizer_dir) / file;
    if (!fs::exists(source)) continue;
    std::error_code ec;
    fs::copy_file(source, dir / file, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      throw IoError("cannot copy tokenizer file '" + source.string() + "' into '" + dir.string() +
                    "': " + ec.message());
    }
    fsync_path(dir / file);
  }
}

void move_into_place(const fs::path& staging, const fs::path& target) {
  const fs::path previous = target.string() + ".old." + std::to_string(::getpid());
  const bool replacing = fs::exists(target);
  std::error_code ec;
  if (replacing) fs::rename(target, previous);
  try {
    fs::rename(staging, target);
  } catch (...) {
    if (replacing) fs::rename(previous, target, ec);
    throw;
  }
  if (replacing) fs::remove_all(previous, ec);
  fsync_path(target.has_parent_path() ? target.parent_path() : fs::path("."));
}

}  // namespace ooze::models
