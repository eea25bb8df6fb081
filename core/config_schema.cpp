#include "core/config_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/config_spelling.h"
#include "core/error.h"

namespace ooze {
namespace {

using config_spelling::dashes;
using config_spelling::edit_distance;
using config_spelling::join;
using config_spelling::show_json;
using config_spelling::underscores;

bool is_snake_case(const std::string& name) {
  if (name.empty() || !std::islower(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Integers print without a fraction ("1", not "1.0"); other numbers as the shortest round trip.
std::string format_number(double value) {
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  return nlohmann::json(value).dump();
}

bool number_in_range(const FieldSpec& spec, long double value) {
  if (spec.lower) {
    long double bound = *spec.lower;
    if (spec.lower_inclusive ? value < bound : value <= bound) return false;
  }
  if (spec.upper) {
    long double bound = *spec.upper;
    if (spec.upper_inclusive ? value > bound : value >= bound) return false;
  }
  return true;
}

// Checks that a schema default satisfies the field's own declaration.
void validate_default(const FieldSpec& spec) {
  // A required field has none; one core/option_fields.h builds gets its default when declared.
  if (spec.is_required || spec.default_value.is_null()) return;
  if (!spec.in_range(spec.default_value)) {
    throw ConfigError("schema: default " + show_json(spec.default_value) + " of '" + spec.name +
                      "' is outside its range " + spec.range_text());
  }
}

}  // namespace

std::string field_type_name(FieldType type) {
  switch (type) {
    case FieldType::kBool:
      return "bool";
    case FieldType::kInt:
      return "int";
    case FieldType::kDouble:
      return "float";
    case FieldType::kString:
      return "string";
    case FieldType::kEnum:
      return "enum";
    case FieldType::kIntList:
      return "int list";
    case FieldType::kStringList:
      return "string list";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// FieldSpec

FieldSpec& FieldSpec::min(double value) {
  lower = value;
  lower_inclusive = true;
  validate_default(*this);
  return *this;
}

FieldSpec& FieldSpec::greater_than(double value) {
  lower = value;
  lower_inclusive = false;
  validate_default(*this);
  return *this;
}

FieldSpec& FieldSpec::max(double value) {
  upper = value;
  upper_inclusive = true;
  validate_default(*this);
  return *this;
}

FieldSpec& FieldSpec::less_than(double value) {
  upper = value;
  upper_inclusive = false;
  validate_default(*this);
  return *this;
}

FieldSpec& FieldSpec::required() {
  is_required = true;
  default_value = nullptr;
  return *this;
}

FieldSpec& FieldSpec::default_shown_as(std::string text) {
  default_text = std::move(text);
  return *this;
}

FieldSpec& FieldSpec::repeatable() {
  if (type != FieldType::kIntList && type != FieldType::kStringList) {
    throw ConfigError("schema: '" + name + "' is not a list: only lists repeat");
  }
  repeats = true;
  return *this;
}

FieldSpec& FieldSpec::bare_value(std::string text) {
  value_when_bare = std::move(text);
  return *this;
}

std::string FieldSpec::flag() const { return "--" + dashes(name); }

std::string FieldSpec::range_text() const {
  if (lower && upper) {
    return std::string("in ") + (lower_inclusive ? "[" : "(") + format_number(*lower) + ", " +
           format_number(*upper) + (upper_inclusive ? "]" : ")");
  }
  if (lower) return (lower_inclusive ? ">= " : "> ") + format_number(*lower);
  if (upper) return (upper_inclusive ? "<= " : "< ") + format_number(*upper);
  return "";
}

bool FieldSpec::in_range(const nlohmann::json& value) const {
  switch (type) {
    case FieldType::kInt:
      return number_in_range(*this, static_cast<long double>(value.get<int64_t>()));
    case FieldType::kDouble:
      return number_in_range(*this, static_cast<long double>(value.get<double>()));
    case FieldType::kIntList:
      for (const auto& element : value) {
        if (!number_in_range(*this, static_cast<long double>(element.get<int64_t>()))) {
          return false;
        }
      }
      return true;
    default:
      return true;
  }
}

// ---------------------------------------------------------------------------------------------
// ConfigSchema

ConfigSchema& ConfigSchema::section(const std::string& name) {
  current_section_ = name;
  return *this;
}

FieldSpec& ConfigSchema::add(const std::string& name, FieldType type, nlohmann::json default_value,
                             const std::string& doc) {
  FieldSpec spec;
  spec.name = name;
  spec.type = type;
  spec.default_value = std::move(default_value);
  spec.doc = doc;
  return add_field(std::move(spec));
}

void ConfigSchema::check_new_name(const std::string& name) const {
  if (!is_snake_case(name)) {
    throw ConfigError("schema: field name '" + name + "' is not snake_case");
  }
  if (find(name) != nullptr || find_alias(name) != nullptr) {
    throw ConfigError("schema: field '" + name + "' declared twice");
  }
}

FieldSpec& ConfigSchema::add_field(FieldSpec spec) {
  check_new_name(spec.name);
  if (spec.type == FieldType::kEnum && std::find(spec.choices.begin(), spec.choices.end(),
                                                 spec.default_value) == spec.choices.end()) {
    const std::string shown = spec.default_value.is_string() ? spec.default_value.get<std::string>()
                                                             : spec.default_value.dump();
    throw ConfigError("schema: default '" + shown + "' of '" + spec.name + "' is not one of {" +
                      join(spec.choices, ", ") + "}");
  }
  validate_default(spec);
  if (spec.section.empty()) spec.section = current_section_;
  fields_.push_back(std::move(spec));
  return fields_.back();
}

FieldSpec& ConfigSchema::add_bool(const std::string& name, bool default_value,
                                  const std::string& doc) {
  return add(name, FieldType::kBool, default_value, doc);
}

FieldSpec& ConfigSchema::add_int(const std::string& name, int64_t default_value,
                                 const std::string& doc) {
  return add(name, FieldType::kInt, default_value, doc);
}

FieldSpec& ConfigSchema::add_double(const std::string& name, double default_value,
                                    const std::string& doc) {
  return add(name, FieldType::kDouble, default_value, doc);
}

FieldSpec& ConfigSchema::add_string(const std::string& name, const std::string& default_value,
                                    const std::string& doc) {
  return add(name, FieldType::kString, default_value, doc);
}

FieldSpec& ConfigSchema::add_enum(const std::string& name, const std::vector<std::string>& choices,
                                  const std::string& default_value, const std::string& doc) {
  FieldSpec spec;
  spec.name = name;
  spec.type = FieldType::kEnum;
  spec.default_value = default_value;
  spec.doc = doc;
  spec.choices = choices;
  return add_field(std::move(spec));
}

FieldSpec& ConfigSchema::add_int_list(const std::string& name,
                                      const std::vector<int64_t>& default_value,
                                      const std::string& doc) {
  return add(name, FieldType::kIntList, default_value, doc);
}

FieldSpec& ConfigSchema::add_string_list(const std::string& name,
                                         const std::vector<std::string>& default_value,
                                         const std::string& doc) {
  return add(name, FieldType::kStringList, default_value, doc);
}

FieldAlias& ConfigSchema::add_alias(FieldSpec spec, AliasExpansion expand) {
  check_new_name(spec.name);
  spec.default_value = nullptr;
  if (spec.section.empty()) spec.section = current_section_;
  aliases_.push_back({std::move(spec), std::move(expand)});
  return aliases_.back();
}

FieldAlias& ConfigSchema::add_synonym(const std::string& name, const std::string& field,
                                      const std::string& doc) {
  const FieldSpec* target = find(field);
  if (target == nullptr) {
    throw ConfigError("schema: synonym '" + name + "' of '" + field + "', which is not declared");
  }
  FieldSpec spec = *target;
  spec.name = name;
  spec.doc = doc;
  spec.section.clear();
  spec.is_required = false;
  spec.default_text.clear();
  const std::string key = target->name;
  return add_alias(std::move(spec), [key](const nlohmann::json& value) {
    return std::vector<std::pair<std::string, nlohmann::json>>{{key, value}};
  });
}

void ConfigSchema::add_hint(const std::string& name, const std::string& message) {
  hints_.emplace_back(underscores(name), message);
}

const FieldAlias* ConfigSchema::find_alias(const std::string& name) const {
  const std::string key = underscores(name);
  for (const auto& alias : aliases_) {
    if (alias.spec.name == key) return &alias;
  }
  return nullptr;
}

const std::string* ConfigSchema::find_hint(const std::string& name) const {
  const std::string key = underscores(name);
  for (const auto& [pattern, message] : hints_) {
    if (pattern == key) return &message;
  }
  for (const auto& [pattern, message] : hints_) {
    if (!pattern.empty() && pattern.back() == '*' &&
        key.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0) {
      return &message;
    }
  }
  return nullptr;
}

bool ConfigSchema::takes_flag(const std::string& name) const {
  const std::string key = underscores(name);
  if (find(key) != nullptr || find_alias(key) != nullptr) return true;
  if (key.compare(0, 3, "no_") != 0) return false;
  const FieldSpec* field = find(key.substr(3));
  const FieldAlias* alias = find_alias(key.substr(3));
  return (field != nullptr && field->type == FieldType::kBool) ||
         (alias != nullptr && alias->spec.type == FieldType::kBool);
}

void ConfigSchema::add_check(const std::string& name, ConfigCheck check) {
  checks_.emplace_back(name, std::move(check));
}

const FieldSpec* ConfigSchema::find(const std::string& name) const {
  std::string key = underscores(name);
  for (const auto& spec : fields_) {
    if (spec.name == key) return &spec;
  }
  return nullptr;
}

std::string ConfigSchema::nearest_field(const std::string& name) const {
  std::string key = underscores(name);
  // Close means at most a third of the longer name differs (typos and truncations).
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& spec : fields_) {
    size_t distance = edit_distance(key, spec.name);
    size_t threshold = std::max<size_t>(1, std::max(key.size(), spec.name.size()) / 3);
    if (distance <= threshold && distance < best_distance) {
      best = spec.name;
      best_distance = distance;
    }
  }
  return best;
}

std::vector<std::string> ConfigSchema::sections() const {
  std::vector<std::string> names;
  for (const auto& spec : fields_) {
    if (std::find(names.begin(), names.end(), spec.section) == names.end()) {
      names.push_back(spec.section);
    }
  }
  return names;
}

}  // namespace ooze
