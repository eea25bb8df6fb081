// Config and its resolution: defaults < JSON file < flags, converted to the declared types,
// range-checked, cross-checked, every problem reported at once. The schema is in
// core/config_schema.cpp, the help text in core/config_help.cpp.
#include "core/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/atomic_file.h"
#include "core/config_spelling.h"
#include "core/error.h"

namespace ooze {
namespace {

using config_spelling::dashes;
using config_spelling::join;
using config_spelling::show_json;
using config_spelling::underscores;

// Thrown by Config::get while checks run, when the check reads a field that failed to resolve.
// Not an ooze::Error, so a check that catches ConfigError does not swallow it.
struct BrokenFieldAccess {};

// What a field accepts, as the object of "expected ...".
std::string expectation(const FieldSpec& spec) {
  std::string range = spec.range_text();
  switch (spec.type) {
    case FieldType::kBool:
      return "true or false";
    case FieldType::kInt:
      return range.empty() ? "an integer" : "an integer " + range;
    case FieldType::kDouble:
      return range.empty() ? "a number" : "a number " + range;
    case FieldType::kString:
      return "a string";
    case FieldType::kEnum:
      return "one of {" + join(spec.choices, ", ") + "}";
    case FieldType::kIntList:
      return range.empty() ? "a list of integers" : "a list of integers, each " + range;
    case FieldType::kStringList:
      return "a list of strings";
  }
  return "?";
}

constexpr long double kInt64Limit = 9223372036854775808.0L;  // 2^63

// JSON number -> int64. Returns "" on success, else why not (appended to "expected ...").
std::string json_to_int(const nlohmann::json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return "overflows a 64-bit integer";
    }
    *out = static_cast<int64_t>(value.get<uint64_t>());
    return "";
  }
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return "";
  }
  if (value.is_number_float()) {
    double d = value.get<double>();
    if (!std::isfinite(d) || d != std::trunc(d)) return "not an integer";
    if (d < -kInt64Limit || d >= kInt64Limit) return "overflows a 64-bit integer";
    *out = static_cast<int64_t>(d);  // 64.0 or 1e3 in a file means what it says
    return "";
  }
  return "not a number";
}

// Converts a JSON value to the field's type, without range checks. Returns false on mismatch;
// `why` may then carry a detail ("overflows a 64-bit integer").
bool convert_json(const FieldSpec& spec, const nlohmann::json& in, nlohmann::json* out,
                  std::string* why) {
  switch (spec.type) {
    case FieldType::kBool:
      if (!in.is_boolean()) return false;
      *out = in;
      return true;
    case FieldType::kInt: {
      if (!in.is_number()) return false;
      int64_t v = 0;
      *why = json_to_int(in, &v);
      if (!why->empty()) return false;
      *out = v;
      return true;
    }
    case FieldType::kDouble:
      if (!in.is_number()) return false;
      *out = in.get<double>();
      return true;
    case FieldType::kString:
      if (!in.is_string()) return false;
      *out = in;
      return true;
    case FieldType::kEnum:
      if (!in.is_string()) return false;
      if (std::find(spec.choices.begin(), spec.choices.end(), in.get<std::string>()) ==
          spec.choices.end()) {
        return false;
      }
      *out = in;
      return true;
    case FieldType::kIntList: {
      if (!in.is_array()) return false;
      nlohmann::json list = nlohmann::json::array();
      for (const auto& element : in) {
        int64_t v = 0;
        std::string element_why = json_to_int(element, &v);
        if (!element_why.empty()) {
          *why = "element " + show_json(element) + " is " + element_why;
          return false;
        }
        list.push_back(v);
      }
      *out = std::move(list);
      return true;
    }
    case FieldType::kStringList:
      if (!in.is_array()) return false;
      for (const auto& element : in) {
        if (!element.is_string()) return false;
      }
      *out = in;
      return true;
  }
  return false;
}

std::string text_to_int(const std::string& text, int64_t* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return "not an integer";
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size()) return "not an integer";
  if (errno == ERANGE) return "overflows a 64-bit integer";
  *out = static_cast<int64_t>(v);
  return "";
}

// Command-line text -> the field's type. Same contract as convert_json.
bool convert_text(const FieldSpec& spec, const std::string& text, nlohmann::json* out,
                  std::string* why) {
  switch (spec.type) {
    case FieldType::kBool:
      if (text == "true" || text == "1") {
        *out = true;
      } else if (text == "false" || text == "0") {
        *out = false;
      } else {
        return false;
      }
      return true;
    case FieldType::kInt: {
      int64_t v = 0;
      *why = text_to_int(text, &v);
      if (!why->empty()) return false;
      *out = v;
      return true;
    }
    case FieldType::kDouble: {
      if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size()) return false;
      if (!std::isfinite(v)) {
        *why = "not a finite number";
        return false;
      }
      *out = v;
      return true;
    }
    case FieldType::kString:
      *out = text;
      return true;
    case FieldType::kEnum:
      return convert_json(spec, nlohmann::json(text), out, why);
    case FieldType::kIntList:
    case FieldType::kStringList: {
      nlohmann::json list = nlohmann::json::array();
      std::stringstream stream(text);
      std::string item;
      while (!text.empty() && std::getline(stream, item, ',')) {
        if (spec.type == FieldType::kStringList) {
          list.push_back(item);
          continue;
        }
        int64_t v = 0;
        std::string element_why = text_to_int(item, &v);
        if (!element_why.empty()) {
          *why = "element '" + item + "' is " + element_why;
          return false;
        }
        list.push_back(v);
      }
      if (!text.empty() && text.back() == ',' && spec.type == FieldType::kIntList) {
        *why = "trailing comma";
        return false;
      }
      *out = std::move(list);
      return true;
    }
  }
  return false;
}

// "<where>: expected <what>, got <value>[ (<why>)]".
std::string mismatch(const std::string& where, const FieldSpec& spec, const std::string& shown,
                     const std::string& why) {
  return where + ": expected " + expectation(spec) + ", got " + shown +
         (why.empty() ? "" : " (" + why + ")");
}

std::string source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::kDefault:
      return "default";
    case ConfigSource::kFile:
      return "file";
    case ConfigSource::kFlag:
      return "flag";
  }
  return "?";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Config

const Config::Entry& Config::entry(const std::string& key, const char* requested_type) const {
  if (!schema_) throw ConfigError("Config: empty config (build one with load_config)");
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    std::string nearest = schema_->nearest_field(key);
    throw ConfigError(std::string("Config::get<") + requested_type + ">: '" + key +
                      "' is not a declared config field" +
                      (nearest.empty() ? "" : "; did you mean '" + nearest + "'?"));
  }
  if (broken_.count(key) != 0) throw BrokenFieldAccess{};
  return it->second;
}

const nlohmann::json& Config::value(const std::string& key) const {
  return entry(key, "json").value;
}

const nlohmann::json& Config::value_as(const std::string& key, FieldType type) const {
  const char* requested = type == FieldType::kString    ? "std::string"
                          : type == FieldType::kInt     ? "int64_t"
                          : type == FieldType::kDouble  ? "double"
                          : type == FieldType::kBool    ? "bool"
                          : type == FieldType::kIntList ? "std::vector<int64_t>"
                                                        : "std::vector<std::string>";
  const Entry& found = entry(key, requested);
  FieldType declared = schema_->find(key)->type;
  bool matches = declared == type || (type == FieldType::kString && declared == FieldType::kEnum);
  if (!matches) {
    throw ConfigError(std::string("Config::get<") + requested + ">('" + key + "'): the field is " +
                      "declared as " + field_type_name(declared));
  }
  return found.value;
}

ConfigSource Config::source(const std::string& key) const { return entry(key, "source").source; }

const std::string& Config::origin(const std::string& key) const {
  return entry(key, "origin").origin;
}

bool Config::is_default_value(const std::string& key) const {
  return entry(key, "is_default_value").value == schema_->find(key)->default_value;
}

nlohmann::json Config::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, found] : entries_) out[key] = found.value;
  return out;
}

std::string Config::describe() const {
  if (!schema_) return "";
  size_t key_width = 0, value_width = 0;
  for (const auto& spec : schema_->fields()) {
    key_width = std::max(key_width, spec.name.size());
    value_width = std::max(value_width, show_json(entries_.at(spec.name).value).size());
  }
  value_width = std::min<size_t>(value_width, 40);
  std::ostringstream out;
  for (const auto& section : schema_->sections()) {  // grouped as help() groups them
    out << section << ":\n";
    for (const auto& spec : schema_->fields()) {
      if (spec.section != section) continue;
      const Entry& found = entries_.at(spec.name);
      bool differs = found.value != spec.default_value;
      std::string value = show_json(found.value);
      out << (differs ? "  * " : "    ") << spec.name
          << std::string(key_width - spec.name.size(), ' ') << " = " << value;
      if (found.source != ConfigSource::kDefault) {
        if (value.size() < value_width) out << std::string(value_width - value.size(), ' ');
        out << "  (" << source_name(found.source) << " " << found.origin;
        if (differs && !spec.is_required) out << "; default " << show_json(spec.default_value);
        out << ")";
      }
      out << "\n";
    }
  }
  return out.str();
}

std::string Config::describe_changes() const {
  if (!schema_) return "";
  std::ostringstream out;
  for (const auto& section : schema_->sections()) {
    bool header = false;
    for (const auto& spec : schema_->fields()) {
      const Entry& found = entries_.at(spec.name);
      if (spec.section != section || found.value == spec.default_value) continue;
      if (!header) out << section << ":\n";
      header = true;
      out << "  " << spec.name << " = " << show_json(found.value) << "  ("
          << (found.source == ConfigSource::kFlag ? found.origin
                                                  : source_name(found.source) + " " + found.origin);
      if (!spec.is_required) out << "; default " << show_json(spec.default_value);
      out << ")\n";
    }
  }
  return out.str();
}

void Config::save_effective_config(const std::string& dir) const {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw IoError("cannot create directory '" + dir + "': " + error.message());
  write_file_atomically((std::filesystem::path(dir) / "config.json").string(),
                        to_json().dump(2) + "\n");
}

// ---------------------------------------------------------------------------------------------
// Loading

namespace {

// An alias given in the file or on the command line, applied once every field is resolved.
struct GivenAlias {
  const FieldAlias* alias = nullptr;
  nlohmann::json value;
  ConfigSource source = ConfigSource::kDefault;
  std::string origin;  // the file path, or the flag as typed
  std::string where;   // "'seed' in exp.json", or the flag as typed
};

// Flags suggest flags ("--global-batch-size"), files keys ("global_batch_size").
std::string dashes_if(const std::string& flag_prefix, const std::string& name) {
  return flag_prefix.empty() ? name : dashes(name);
}

int precedence(ConfigSource source) {
  return source == ConfigSource::kFlag ? 2 : source == ConfigSource::kFile ? 1 : 0;
}

// "unknown flag '--x'; did you mean '--y'?" (`in` names the file, for keys), or the hint the
// schema has for it: what to use instead.
std::string unknown_name(const ConfigSchema& schema, const std::string& key,
                         const std::string& what, const std::string& shown, const std::string& in,
                         const std::string& suggestion_prefix) {
  if (const std::string* hint = schema.find_hint(key)) return "'" + shown + "'" + in + ": " + *hint;
  const std::string nearest = schema.nearest_field(key);
  return "unknown " + what + " '" + shown + "'" + in +
         (nearest.empty() ? ""
                          : "; did you mean '" + suggestion_prefix +
                                dashes_if(suggestion_prefix, nearest) + "'?");
}

}  // namespace

Config resolve_config(const ConfigSchema& schema, const nlohmann::json& file_values,
                      const std::string& origin, const std::vector<std::string>& args) {
  Config config;
  config.schema_ = std::make_shared<const ConfigSchema>(schema);
  std::vector<std::string> problems;
  std::vector<GivenAlias> given_aliases;

  for (const auto& spec : schema.fields()) config.entries_[spec.name].value = spec.default_value;

  auto set = [&](const FieldSpec& spec, nlohmann::json value, ConfigSource source,
                 const std::string& where, bool via_alias) {
    Config::Entry& slot = config.entries_[spec.name];
    slot.value = std::move(value);
    slot.source = source;
    slot.origin = where;
    slot.via_alias = via_alias;
    config.broken_.erase(spec.name);
  };

  // The file.
  if (!file_values.is_null() && !file_values.is_object()) {
    problems.push_back(origin + ": expected a JSON object at the top level, got " +
                       std::string(file_values.type_name()));
  } else if (file_values.is_object()) {
    for (const auto& [key, raw] : file_values.items()) {
      const FieldSpec* spec = schema.find(key);
      const FieldAlias* alias = spec == nullptr ? schema.find_alias(key) : nullptr;
      if (alias != nullptr) spec = &alias->spec;
      if (spec == nullptr || spec->name != key) {
        problems.push_back(unknown_name(schema, key, "key", key, " in " + origin, ""));
        continue;
      }
      nlohmann::json value;
      std::string why;
      std::string where = "'" + key + "' in " + origin;
      if (!convert_json(*spec, raw, &value, &why) || !spec->in_range(value)) {
        problems.push_back(mismatch(where, *spec, show_json(raw), why));
        if (alias == nullptr) config.broken_.insert(key);
        continue;
      }
      if (alias != nullptr) {
        given_aliases.push_back({alias, std::move(value), ConfigSource::kFile, origin, where});
        continue;
      }
      set(*spec, std::move(value), ConfigSource::kFile, origin, false);
    }
  }

  // The flags, in order.
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() <= 2 || arg.compare(0, 2, "--") != 0) {
      problems.push_back("unexpected argument '" + arg + "': flags look like --key value");
      continue;
    }
    size_t equals = arg.find('=');
    std::string typed = arg.substr(0, equals);  // "--global-batch-size" as the user wrote it
    std::optional<std::string> inline_value;
    if (equals != std::string::npos) inline_value = arg.substr(equals + 1);
    std::string key = underscores(typed.substr(2));
    bool next_is_value = i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0;

    // A field, else an alias; either may be a bool negated by "no_".
    auto lookup = [&](const std::string& name, const FieldAlias** alias) -> const FieldSpec* {
      if (const FieldSpec* field = schema.find(name)) return field;
      *alias = schema.find_alias(name);
      return *alias != nullptr ? &(*alias)->spec : nullptr;
    };
    const FieldAlias* alias = nullptr;
    const FieldSpec* spec = lookup(key, &alias);
    bool negated = false;
    if (spec == nullptr && key.compare(0, 3, "no_") == 0) {
      const FieldSpec* positive = lookup(key.substr(3), &alias);
      if (positive != nullptr && positive->type == FieldType::kBool) {
        spec = positive;
        negated = true;
      } else {
        alias = nullptr;
      }
    }
    if (spec == nullptr) {
      problems.push_back(unknown_name(schema, key, "flag", typed, "", "--"));
      if (!inline_value && next_is_value) ++i;  // its value, most likely
      continue;
    }

    std::string text;
    if (negated) {
      if (inline_value) {
        problems.push_back(typed + " takes no value, got '" + *inline_value + "'");
        continue;
      }
      text = "false";
    } else if (inline_value) {
      text = *inline_value;
    } else if (spec->type == FieldType::kBool) {
      text = "true";
      if (next_is_value) {
        const std::string& next = args[i + 1];
        if (next == "true" || next == "false" || next == "1" || next == "0") text = args[++i];
      }
    } else if (next_is_value) {
      text = args[++i];
    } else if (spec->value_when_bare) {
      text = *spec->value_when_bare;
    } else {
      problems.push_back(typed + ": missing value (expected " + expectation(*spec) + ")");
      if (alias == nullptr) config.broken_.insert(spec->name);
      continue;
    }

    nlohmann::json value;
    std::string why;
    if (!convert_text(*spec, text, &value, &why) || !spec->in_range(value)) {
      problems.push_back(mismatch(typed, *spec, "'" + text + "'", why));
      if (alias == nullptr) config.broken_.insert(spec->name);
      continue;
    }
    if (alias != nullptr) {
      given_aliases.push_back({alias, std::move(value), ConfigSource::kFlag, typed, typed});
      continue;
    }
    const Config::Entry& before = config.entries_[spec->name];
    if (spec->repeats && before.source == ConfigSource::kFlag && !before.via_alias) {
      nlohmann::json joined = before.value;
      for (auto& element : value) joined.push_back(std::move(element));
      value = std::move(joined);
    }
    set(*spec, std::move(value), ConfigSource::kFlag, typed, false);
  }

  // The aliases, once every field has the value the file and the flags give it directly.
  for (const GivenAlias& given : given_aliases) {
    std::vector<std::pair<std::string, nlohmann::json>> sets;
    try {
      sets = given.alias->expand(given.value);
    } catch (const std::exception& e) {
      problems.push_back(given.where + ": " + e.what());
      continue;
    }
    for (const auto& [target, raw] : sets) {
      const FieldSpec* field = schema.find(target);
      if (field == nullptr) {
        problems.push_back(given.where + " would set '" + target + "', which this command has not");
        continue;
      }
      nlohmann::json value;
      std::string why;
      if (!convert_json(*field, raw, &value, &why) || !field->in_range(value)) {
        problems.push_back(
            mismatch(given.where + " (as " + field->flag() + ")", *field, show_json(raw), why));
        continue;
      }
      const Config::Entry& slot = config.entries_[field->name];
      if (slot.source != ConfigSource::kDefault && !slot.via_alias) {
        const int set_by = precedence(slot.source), alias_level = precedence(given.source);
        if (set_by > alias_level) continue;  // a flag wins over the file, whatever its spelling
        if (set_by == alias_level && slot.value != value) {
          problems.push_back(given.where + " means " + field->flag() + " " + show_json(value) +
                             ", but " + slot.origin + " sets it to " + show_json(slot.value) +
                             ": keep one");
          continue;
        }
      }
      set(*field, std::move(value), given.source, given.origin, true);
    }
  }

  for (const auto& spec : schema.fields()) {
    if (spec.is_required && config.entries_[spec.name].value.is_null() &&
        config.broken_.count(spec.name) == 0) {
      problems.push_back("missing required field '" + spec.name +
                         "' (set it in the config file or "
                         "with " +
                         spec.flag() + "): " + spec.doc);
      config.broken_.insert(spec.name);
    }
  }

  for (const auto& [name, check] : schema.checks()) {
    std::string message;
    try {
      message = check(config);
    } catch (const BrokenFieldAccess&) {
      continue;  // it depends on a field already reported above
    } catch (const std::exception& e) {
      message = e.what();
    }
    if (!message.empty()) problems.push_back(message + " [check " + name + "]");
  }
  config.broken_.clear();

  if (!problems.empty()) {
    std::string text = "invalid configuration (" + std::to_string(problems.size()) +
                       (problems.size() == 1 ? " problem):" : " problems):");
    for (const auto& problem : problems) text += "\n  " + problem;
    throw ConfigError(text);
  }
  return config;
}

std::optional<Config> load_config_from_command_line(const ConfigSchema& schema,
                                                    const std::vector<std::string>& args) {
  std::string config_path;
  std::vector<std::string> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") return std::nullopt;
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) throw ConfigError("--config needs a file path");
      config_path = args[++i];
    } else if (args[i].rfind("--config=", 0) == 0) {
      config_path = args[i].substr(9);
    } else {
      flags.push_back(args[i]);
    }
  }
  return load_config(schema, config_path, flags);
}

Config load_config(const ConfigSchema& schema, const std::string& file_path,
                   const std::vector<std::string>& args) {
  nlohmann::json file_values;
  if (!file_path.empty()) {
    std::ifstream in(file_path);
    if (!in) {
      throw ConfigError("cannot read config file '" + file_path + "': " + std::strerror(errno));
    }
    std::stringstream text;
    text << in.rdbuf();
    try {
      // Comments are allowed: experiment files are documentation too.
      file_values = nlohmann::json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
    } catch (const nlohmann::json::parse_error& e) {
      // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ...".
      std::string what = e.what();
      size_t start = what.find("] ");
      throw ConfigError("invalid JSON in config file '" + file_path +
                        "': " + (start == std::string::npos ? what : what.substr(start + 2)));
    }
  }
  return resolve_config(schema, file_values, file_path, args);
}

}  // namespace ooze
