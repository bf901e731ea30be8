// JsonSchema: the one check every JSON document a program reads goes through before its values are used (types,
// ranges, required and unknown keys), and parse_json / read_json_file, the bounded parse in front of it. Every error
// names the document and the JSON path of the value:
//   "cluster file c.json: .intra_node.bandwidth_gbs: expected a number, got "x""
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace strata {

class JsonSchema {
 public:
  // What an object does with a key its schema does not list.
  enum class Unknown {
    kRefuse,  // an error naming the key and the keys it knows (a user's file: a typo must not pass unseen)
    kReport,  // accepted, and returned by check() for the reader to warn about (a format's forward compatibility)
    kAllow,   // accepted silently (a record kept for the user, such as a run's configuration)
  };
  struct Field;

  static JsonSchema any();
  static JsonSchema boolean();
  static JsonSchema string(std::size_t max_chars = 1 << 16);
  // One of the strings `allowed`.
  static JsonSchema one_of(std::vector<std::string> allowed);
  // An integer in [min, max]. A JSON number written with a fraction or an exponent counts when its value is a whole
  // number below 2^53 (80e9); anything else, or out of range (an overflow is never read modulo 2^32), is an error.
  static JsonSchema integer(std::int64_t min, std::uint64_t max);
  // A finite number in [min, max] (or (min, max] with min_open).
  static JsonSchema number(double min, double max, bool min_open = false);
  static JsonSchema array(JsonSchema items, std::size_t max_items = std::size_t{1} << 24);
  static JsonSchema object(std::vector<Field> fields, Unknown unknown = Unknown::kRefuse);
  // An object of any keys, each value of `values`.
  static JsonSchema map(JsonSchema values, std::size_t max_keys = std::size_t{1} << 24);
  // This schema, or null.
  JsonSchema or_null() const;

  // Checks `doc`; throws `code` "<origin>: <path>: <problem>" at the first value that does not fit. Returns the paths
  // of the keys that Unknown::kReport objects did not know, for the reader to name in a warning. `path` is where `doc`
  // sits in its document (".state.trainer"), for a part checked on its own.
  std::vector<std::string> check(const nlohmann::json& doc, const std::string& origin,
                                 ErrorCode code = ErrorCode::kInvalidArgument, const std::string& path = "") const;

  struct Node;  // the representation (json_schema.cc)
  const Node& node() const { return *node_; }

 private:
  explicit JsonSchema(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
};

struct JsonSchema::Field {
  std::string key;
  JsonSchema schema;
  bool required = true;
};
inline JsonSchema::Field required(std::string key, JsonSchema schema) {
  return {std::move(key), std::move(schema), true};
}
inline JsonSchema::Field optional(std::string key, JsonSchema schema) {
  return {std::move(key), std::move(schema), false};
}

// "(the top level)", ".a.b[2]", ".tensors[\"params/wte.weight\"]": a JSON path as the messages write it.
std::string json_path_child(const std::string& parent, const std::string& key);
std::string json_path_index(const std::string& parent, std::size_t index);

// The deepest nesting parse_json accepts: copying or printing a value nested thousands deep recurses past the stack.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; `code` "<origin>: not valid JSON: <where and why>" or "<origin>: nested deeper than 64 levels".
nlohmann::json parse_json(const std::string& text, const std::string& origin,
                          ErrorCode code = ErrorCode::kInvalidArgument);
// A JSON file read through the checked input path (a regular file, at most `max_bytes`, readable: core/file_checks.h),
// then parsed. `what` names it in errors ("cluster file", "--config").
nlohmann::json read_json_file(const std::string& path, const std::string& what, std::size_t max_bytes,
                              ErrorCode code = ErrorCode::kInvalidArgument);

}  // namespace strata
