#include "serving/json_fields.h"

#include <cmath>
#include <limits>

namespace ooze::serving {
namespace {

const char* type_name(const nlohmann::json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  return "null";
}

[[noreturn]] void wrong_type(const nlohmann::json& value, const std::string& field,
                             const std::string& expected) {
  throw engine::InvalidRequest(field, "must be " + expected + ", got " + type_name(value));
}

}  // namespace

nlohmann::json parse_json_body(const std::string& body) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {  // syntax, invalid UTF-8, number overflow
    throw engine::InvalidRequest("body",
                                 std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!parsed.is_object()) {
    throw engine::InvalidRequest(
        "body", std::string("the request body must be a JSON object, got ") + type_name(parsed));
  }
  return parsed;
}

JsonFields::JsonFields(const nlohmann::json& object, std::string path)
    : object_(object), path_(std::move(path)) {
  if (!object_.is_object()) wrong_type(object_, path_.empty() ? "body" : path_, "an object");
}

std::string JsonFields::field_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

const nlohmann::json* JsonFields::raw(const std::string& key) {
  read_.insert(key);
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> JsonFields::boolean(const std::string& key) {
  const nlohmann::json* value = raw(key);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) wrong_type(*value, field_path(key), "true or false");
  return value->get<bool>();
}

std::optional<int64_t> JsonFields::integer(const std::string& key) {
  const nlohmann::json* value = raw(key);
  if (!value) return std::nullopt;
  return json_integer(*value, field_path(key));
}

std::optional<double> JsonFields::number(const std::string& key) {
  const nlohmann::json* value = raw(key);
  if (!value) return std::nullopt;
  if (!value->is_number()) wrong_type(*value, field_path(key), "a number");
  const double number = value->get<double>();
  if (!std::isfinite(number))
    throw engine::InvalidRequest(field_path(key), "must be a finite number");
  return number;
}

std::optional<std::string> JsonFields::string(const std::string& key) {
  const nlohmann::json* value = raw(key);
  if (!value) return std::nullopt;
  return json_string(*value, field_path(key));
}

void JsonFields::reject_unknown() const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (read_.count(it.key())) continue;
    std::string known;
    for (const std::string& name : read_) known += (known.empty() ? "" : ", ") + name;
    throw engine::InvalidRequest(field_path(it.key()),
                                 "unknown field; this endpoint reads " + known);
  }
}

int64_t json_integer(const nlohmann::json& value, const std::string& field) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw engine::InvalidRequest(field, "is too large: " + value.dump());
    }
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double number = value.get<double>();
    // 2^63 is the first double past int64's range.
    if (std::isfinite(number) && std::trunc(number) == number && number >= -9.2233720368547758e18 &&
        number < 9.2233720368547758e18) {
      return static_cast<int64_t>(number);
    }
    throw engine::InvalidRequest(field, "must be an integer, got " + value.dump());
  }
  wrong_type(value, field, "an integer");
}

std::string json_string(const nlohmann::json& value, const std::string& field) {
  if (!value.is_string()) wrong_type(value, field, "a string");
  return value.get<std::string>();
}

std::vector<std::string> json_string_or_strings(const nlohmann::json& value,
                                                const std::string& field) {
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) wrong_type(value, field, "a string or a list of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i) {
    out.push_back(json_string(value[i], field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

std::vector<int64_t> json_integer_list(const nlohmann::json& value, const std::string& field) {
  if (!value.is_array()) wrong_type(value, field, "a list of integers");
  std::vector<int64_t> out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    out.push_back(json_integer(value[i], field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

}  // namespace ooze::serving
