// Typed, documented experiment configuration: JSON file + command-line overrides.
//
// A ConfigSchema declares every field once (type, default, range, one-line doc, section);
// load_config() resolves defaults < JSON file < flags and reports every problem at once:
//
//   ConfigSchema schema;
//   schema.section("train");
//   schema.add_int("global_batch_size", 64, "Samples per optimizer step.").min(1);
//   schema.add_check("batch_split", [](const Config& c) -> std::string { ... });
//   Config config = load_config(schema, "exp.json", {"--global-batch-size", "128"});
//   int64_t batch = config.get<int64_t>("global_batch_size");
//
// JSON keys are snake_case (`global_batch_size`); flags are the same name with dashes or
// underscores (`--global-batch-size`, `--global_batch_size`). Flag forms: `--key value`,
// `--key=value`; bools also take a bare `--flag` (true), `--flag true|false` and `--no-flag`.
// Lists are JSON arrays in files and comma-separated on the command line (`--ranks 0,2,3`).
//
// The schema lives in core/config_schema.h (included here), its help text in
// core/config_help.cpp; this header is the one users include.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "core/config_schema.h"

namespace ooze {

enum class ConfigSource { kDefault, kFile, kFlag };

// The resolved value of every declared field, plus where each one came from.
// Immutable once loaded, so concurrent reads are safe; it keeps its own copy of the schema.
class Config {
 public:
  // T is bool, int64_t, double, std::string (string and enum fields), std::vector<int64_t>
  // or std::vector<std::string>, and must match the declared type: get<double> of an int
  // field throws ConfigError (a programmer error, reported clearly).
  template <typename T>
  T get(const std::string& key) const;

  // The value as JSON, whatever its type (enums as their spelling).
  const nlohmann::json& value(const std::string& key) const;

  ConfigSource source(const std::string& key) const;
  // Where the value came from: "default", the file path, or the flag as typed ("--lr").
  const std::string& origin(const std::string& key) const;
  bool is_default_value(const std::string& key) const;

  const ConfigSchema& schema() const { return *schema_; }

  // Every field, defaults included.
  nlohmann::json to_json() const;
  // Grouped by section; values that differ from their default are marked '*' and annotated
  // with their origin and the default.
  std::string describe() const;
  // What `ooze train` prints at start: only the fields whose value differs from the default,
  // grouped by section, one line each with where the value came from.
  std::string describe_changes() const;
  // Writes `dir`/config.json (creating `dir`) through a temporary file and rename, so a crash
  // never leaves a torn file. Throws IoError.
  void save_effective_config(const std::string& dir) const;

 private:
  friend Config resolve_config(const ConfigSchema&, const nlohmann::json&, const std::string&,
                               const std::vector<std::string>&);
  struct Entry {
    nlohmann::json value;
    ConfigSource source = ConfigSource::kDefault;
    std::string origin = "default";
    bool via_alias = false;  // set by another spelling (FieldAlias), which a later one may change
  };

  const Entry& entry(const std::string& key, const char* requested_type) const;
  const nlohmann::json& value_as(const std::string& key, FieldType type) const;

  std::shared_ptr<const ConfigSchema> schema_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> broken_;  // fields that failed to resolve; only non-empty mid-load
};

// Resolves defaults < `file_path` (a JSON object; "" for none) < `args` (flags, in order;
// later flags win). Throws one ConfigError listing every problem, one per line.
Config load_config(const ConfigSchema& schema, const std::string& file_path,
                   const std::vector<std::string>& args);

// A command line: `--config FILE` (or `--config=FILE`) names the file, every other argument is
// a flag. Returns nullopt when `args` ask for --help (or -h): print schema.help() then.
std::optional<Config> load_config_from_command_line(const ConfigSchema& schema,
                                                    const std::vector<std::string>& args);

// As load_config, with the file's content already parsed; `origin` names it in messages.
Config resolve_config(const ConfigSchema& schema, const nlohmann::json& file_values,
                      const std::string& origin, const std::vector<std::string>& args);

namespace detail {
template <typename T>
inline constexpr bool kAlwaysFalse = false;
}  // namespace detail

template <typename T>
T Config::get(const std::string& key) const {
  if constexpr (std::is_same_v<T, bool>) {
    return value_as(key, FieldType::kBool).get<bool>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return value_as(key, FieldType::kInt).get<int64_t>();
  } else if constexpr (std::is_same_v<T, double>) {
    return value_as(key, FieldType::kDouble).get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return value_as(key, FieldType::kString).get<std::string>();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    return value_as(key, FieldType::kIntList).get<std::vector<int64_t>>();
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return value_as(key, FieldType::kStringList).get<std::vector<std::string>>();
  } else {
    static_assert(detail::kAlwaysFalse<T>,
                  "Config::get<T>: T must be bool, int64_t, double, std::string, "
                  "std::vector<int64_t> or std::vector<std::string>");
  }
}

}  // namespace ooze
