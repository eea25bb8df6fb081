// The declaration half of the experiment configuration: which fields exist, their types,
// defaults, ranges, docs and sections, and the cross-field checks. core/config.h turns a schema
// plus a JSON file and flags into a validated Config; include that header, it includes this one.
//
//   ConfigSchema schema;
//   schema.section("optimizer");
//   schema.add_double("lr", 1e-6, "Peak learning rate.").greater_than(0);
//   schema.add_check("warmup_fits", [](const Config& c) -> std::string { ... });
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ooze {

class Config;

enum class FieldType { kBool, kInt, kDouble, kString, kEnum, kIntList, kStringList };

// "bool", "int", "float", "string", "enum", "int list", "string list".
std::string field_type_name(FieldType type);

// One declared field. Built by ConfigSchema::add_*; the chainable setters refine it right after:
//   schema.add_double("lr", 0.05, "Learning rate.").greater_than(0);
struct FieldSpec {
  std::string name;  // snake_case JSON key
  FieldType type = FieldType::kString;
  nlohmann::json default_value;  // null when required
  bool is_required = false;
  std::string doc;
  std::string section;
  std::vector<std::string> choices;  // kEnum only
  std::string default_text;          // what help shows as the default, when not default_value
  // List fields: each occurrence of the flag appends (`--engine A --engine B`) instead of
  // replacing what an earlier one gave.
  bool repeats = false;
  // The value the flag takes when given without one (`--chat-template` alone); none: required.
  std::optional<std::string> value_when_bare;

  // Inclusive or exclusive numeric bounds; for lists they apply to every element.
  std::optional<double> lower, upper;
  bool lower_inclusive = true, upper_inclusive = true;

  FieldSpec& min(double value);           // value >= min
  FieldSpec& greater_than(double value);  // value >  bound
  FieldSpec& max(double value);           // value <= max
  FieldSpec& less_than(double value);     // value <  bound
  FieldSpec& required();                  // no default: the file or a flag must set it
  // Help shows "default: TEXT": for a field whose default is another field's value.
  FieldSpec& default_shown_as(std::string text);
  FieldSpec& repeatable();
  FieldSpec& bare_value(std::string text);

  // "--global-batch-size".
  std::string flag() const;
  // "", ">= 1", "> 0", "in [0, 1)".
  std::string range_text() const;
  // Whether `value`, already of this field's type, respects the bounds (every element of a
  // list); true for types without bounds.
  bool in_range(const nlohmann::json& value) const;
};

// Returns "" when the config is consistent, otherwise a message naming every key and value
// involved ("global_batch_size = 64 is not divisible by world_size = 3"). Throwing
// ooze::ConfigError with such a message works too.
using ConfigCheck = std::function<std::string(const Config&)>;

// What an alias sets, from the alias's own value (already of its declared type): (field, value)
// pairs, possibly none. Throw ConfigError to refuse a value; the message is shown after the flag.
using AliasExpansion =
    std::function<std::vector<std::pair<std::string, nlohmann::json>>(const nlohmann::json&)>;

// Another spelling that sets declared fields, such as Slime's `--calculate-per-token-loss` for
// `--loss-aggregation token_mean` or SGLang's `--model-path` for `--model`. It is a flag and a
// JSON key like a field, but not a field of the Config: config.json holds what it set. A field
// that the same level (file or flags) sets to another value is a contradiction, reported; a flag
// still wins over the file either way.
struct FieldAlias {
  FieldSpec spec;  // name, type, choices, range and doc; no default
  AliasExpansion expand;
};

class ConfigSchema {
 public:
  // Fields declared after this call belong to `name`. help() and Config::describe() list the
  // fields section by section (sections in order of first use), so a module can name its
  // section after itself ("optimizer", "fsdp") and declare its fields beside its code.
  ConfigSchema& section(const std::string& name);

  FieldSpec& add_bool(const std::string& name, bool default_value, const std::string& doc);
  FieldSpec& add_int(const std::string& name, int64_t default_value, const std::string& doc);
  FieldSpec& add_double(const std::string& name, double default_value, const std::string& doc);
  FieldSpec& add_string(const std::string& name, const std::string& default_value,
                        const std::string& doc);
  FieldSpec& add_enum(const std::string& name, const std::vector<std::string>& choices,
                      const std::string& default_value, const std::string& doc);
  FieldSpec& add_int_list(const std::string& name, const std::vector<int64_t>& default_value,
                          const std::string& doc);
  FieldSpec& add_string_list(const std::string& name, const std::vector<std::string>& default_value,
                             const std::string& doc);

  // A field built elsewhere (core/option_fields.h declares a struct's fields this way); it goes
  // into the current section unless spec.section names one.
  FieldSpec& add_field(FieldSpec spec);

  // An alias (see FieldAlias); `spec.section` names the help section it is listed in.
  FieldAlias& add_alias(FieldSpec spec, AliasExpansion expand);
  // An alias that is just another name of `field`, of the same type and range.
  FieldAlias& add_synonym(const std::string& name, const std::string& field,
                          const std::string& doc);
  // A flag or key no field takes, refused with `message`: what to use instead and why.
  // `name` may end in '*' to cover every name with that prefix ("sglang_*"); exact names win.
  void add_hint(const std::string& name, const std::string& message);

  // Cross-field validation, run after every field resolved. A check that reads a field which
  // itself failed to resolve is skipped (its message would be about a value nobody chose).
  void add_check(const std::string& name, ConfigCheck check);

  // Declaration order; a deque so the references add_* return stay valid.
  const std::deque<FieldSpec>& fields() const { return fields_; }
  const std::vector<std::pair<std::string, ConfigCheck>>& checks() const { return checks_; }
  // nullptr when `name` is not declared. Accepts dashes for underscores.
  const FieldSpec* find(const std::string& name) const;
  const std::deque<FieldAlias>& aliases() const { return aliases_; }
  // nullptr when `name` is no alias. Accepts dashes for underscores.
  const FieldAlias* find_alias(const std::string& name) const;
  // The hint for `name`, or nullptr. Accepts dashes for underscores.
  const std::string* find_hint(const std::string& name) const;
  const std::vector<std::pair<std::string, std::string>>& hints() const { return hints_; }
  // Whether `--NAME` is a flag this schema takes: a field, an alias, or `no_` and a bool one.
  // What the parser accepts, for tools that check command lines without running them.
  bool takes_flag(const std::string& name) const;
  // The declared name closest to `name` by edit distance, or "" when nothing is close.
  std::string nearest_field(const std::string& name) const;
  // Section names in order of first use, each once.
  std::vector<std::string> sections() const;

  // Field reference grouped by section: flag, type, default, range, JSON key and doc.
  std::string help() const;

 private:
  FieldSpec& add(const std::string& name, FieldType type, nlohmann::json default_value,
                 const std::string& doc);
  // Throws ConfigError unless `name` is snake_case and no field or alias has it yet.
  void check_new_name(const std::string& name) const;

  std::string current_section_ = "general";
  std::deque<FieldSpec> fields_;
  std::deque<FieldAlias> aliases_;
  std::vector<std::pair<std::string, std::string>> hints_;  // name (or prefix*), message
  std::vector<std::pair<std::string, ConfigCheck>> checks_;
};

}  // namespace ooze
