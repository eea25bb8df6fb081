// Strict reading of a JSON request object for the HTTP endpoints: each field is read with its
// expected type, and whatever the endpoint did not read is an unknown field. Every problem is an
// InvalidRequest naming the field by its path ("sampling_params.top_k"), which the server
// answers with HTTP 400 and "param": that path.
//
//   JsonFields fields(body, "");
//   std::optional<int64_t> n = fields.integer("n");
//   if (const nlohmann::json* stop = fields.raw("stop")) { ... }
//   fields.reject_unknown();
//
// A field given as JSON null counts as absent (clients write null for "not set").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace ooze::serving {

// Parses an HTTP body as one JSON object; InvalidRequest("body", ...) when it is not.
nlohmann::json parse_json_body(const std::string& body);

class JsonFields {
 public:
  // `object` must be a JSON object (InvalidRequest naming `path`, or "body" when empty);
  // `path` prefixes field names in errors ("sampling_params").
  JsonFields(const nlohmann::json& object, std::string path);

  // Absent or null: nullopt. Otherwise the value, or InvalidRequest for a wrong type.
  std::optional<bool> boolean(const std::string& key);
  // Integers; a float with an integral value (3.0) is accepted. Out of int64 range is an error.
  std::optional<int64_t> integer(const std::string& key);
  std::optional<double> number(const std::string& key);  // finite numbers only
  std::optional<std::string> string(const std::string& key);
  // The value as it is (marked as read), for fields with several shapes; nullptr when absent
  // or null.
  const nlohmann::json* raw(const std::string& key);

  // InvalidRequest for the first field nobody read, listing the fields this endpoint knows.
  void reject_unknown() const;

  // "sampling_params.top_k" for key "top_k".
  std::string field_path(const std::string& key) const;

 private:
  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string> read_;
};

// Typed readers for values found through raw(), named by their full field path.
int64_t json_integer(const nlohmann::json& value, const std::string& field);
std::string json_string(const nlohmann::json& value, const std::string& field);
// A string or a list of strings (stop sequences).
std::vector<std::string> json_string_or_strings(const nlohmann::json& value,
                                                const std::string& field);
std::vector<int64_t> json_integer_list(const nlohmann::json& value, const std::string& field);

}  // namespace ooze::serving
