// JsonSchema: schema nodes, the one-pass check with JSON paths, and the bounded parse.
#include "core/json_schema.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <set>

#include "core/file_checks.h"

namespace strata {

enum class JsonKind { kAny, kBool, kString, kOneOf, kInteger, kNumber, kArray, kObject, kMap };

struct JsonSchema::Node {
  JsonKind kind = JsonKind::kAny;
  bool nullable = false;
  std::size_t max_size = 0;  // string characters, array items, map keys
  std::vector<std::string> allowed;
  std::int64_t imin = 0;
  std::uint64_t imax = 0;
  double nmin = 0, nmax = 0;
  bool min_open = false;
  std::vector<Field> fields;
  Unknown unknown = Unknown::kRefuse;
  std::shared_ptr<const Node> items;  // array items, map values
};

namespace {

using Json = nlohmann::json;
using Node = JsonSchema::Node;
using Field = JsonSchema::Field;
using Unknown = JsonSchema::Unknown;

// A value as a message shows it: its JSON text, cut to 60 characters.
std::string shown(const Json& v) {
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

const char* kind_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

// "a string \"x\"", "an integer 7", "null": what a value is, for "expected ..., got <this>".
std::string got(const Json& v) {
  return v.is_null() ? std::string("null") : std::string(kind_name(v)) + " " + shown(v);
}

// "2^53" for powers of two a range is usually bounded by, else the number.
std::string bound_text(long double v) {
  for (int e = 20; e <= 64; ++e)
    if (v == std::ldexp(1.0L, e)) return fmt::format("2^{}", e);
  for (int e = 20; e <= 64; ++e)
    if (v == std::ldexp(1.0L, e) - 1) return fmt::format("2^{} - 1", e);
  const double d = static_cast<double>(v);
  return d == std::floor(d) && std::fabs(d) < 1e15 ? fmt::format("{:.0f}", d) : fmt::format("{:g}", d);
}

struct Checker {
  const std::string& origin;
  ErrorCode code;
  std::vector<std::string> reported;

  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    STRATA_THROW(code, "{}: {}: {}", origin, path.empty() ? "(the top level)" : path, problem);
  }

  // Whether `v` is an integer in [min, max], for any of nlohmann's three number types.
  static bool integer_in(const Json& v, std::int64_t min, std::uint64_t max) {
    if (v.is_number_unsigned()) {
      const std::uint64_t u = v.get<std::uint64_t>();
      return u <= max && (min <= 0 || u >= static_cast<std::uint64_t>(min));
    }
    if (v.is_number_integer()) {
      const std::int64_t s = v.get<std::int64_t>();
      return s >= min && (s < 0 || static_cast<std::uint64_t>(s) <= max);
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9007199254740992.0) return false;
      return d >= static_cast<double>(min) && d <= static_cast<double>(max);
    }
    return false;
  }

  void check(const Node& n, const Json& v, const std::string& path) {
    if (v.is_null() && n.nullable) return;
    switch (n.kind) {
      case JsonKind::kAny: return;
      case JsonKind::kBool:
        if (!v.is_boolean()) fail(path, fmt::format("expected true or false, got {}", got(v)));
        return;
      case JsonKind::kString:
        if (!v.is_string()) fail(path, fmt::format("expected a string, got {}", got(v)));
        if (v.get_ref<const std::string&>().size() > n.max_size)
          fail(path, fmt::format("a string of {} characters, more than {}", v.get_ref<const std::string&>().size(),
                                 n.max_size));
        return;
      case JsonKind::kOneOf: {
        std::string list;
        for (const std::string& a : n.allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
        if (!v.is_string()) fail(path, fmt::format("expected one of {}, got {}", list, got(v)));
        for (const std::string& a : n.allowed)
          if (v.get_ref<const std::string&>() == a) return;
        fail(path, fmt::format("expected one of {}, got {}", list, got(v)));
      }
      case JsonKind::kInteger:
        if (!v.is_number()) fail(path, fmt::format("expected an integer, got {}", got(v)));
        if (!integer_in(v, n.imin, n.imax))
          fail(path, fmt::format("expected an integer in [{}, {}], got {}", bound_text(n.imin), bound_text(n.imax),
                                 shown(v)));
        return;
      case JsonKind::kNumber: {
        if (!v.is_number()) fail(path, fmt::format("expected a number, got {}", got(v)));
        const double d = v.get<double>();
        const bool ok = std::isfinite(d) && (n.min_open ? d > n.nmin : d >= n.nmin) && d <= n.nmax;
        if (!ok)
          fail(path, fmt::format("expected a number in {}{}, {}], got {}", n.min_open ? "(" : "[", bound_text(n.nmin),
                                 bound_text(n.nmax), shown(v)));
        return;
      }
      case JsonKind::kArray:
        if (!v.is_array()) fail(path, fmt::format("expected an array, got {}", got(v)));
        if (v.size() > n.max_size) fail(path, fmt::format("{} items, more than {}", v.size(), n.max_size));
        for (std::size_t i = 0; i < v.size(); ++i) check(*n.items, v[i], json_path_index(path, i));
        return;
      case JsonKind::kMap:
        if (!v.is_object()) fail(path, fmt::format("expected an object, got {}", got(v)));
        if (v.size() > n.max_size) fail(path, fmt::format("{} keys, more than {}", v.size(), n.max_size));
        for (const auto& [key, value] : v.items()) check(*n.items, value, json_path_child(path, key));
        return;
      case JsonKind::kObject: {
        if (!v.is_object()) fail(path, fmt::format("expected an object, got {}", got(v)));
        for (const Field& f : n.fields) {
          auto it = v.find(f.key);
          if (it == v.end()) {
            if (f.required) fail(json_path_child(path, f.key), "missing (a required field)");
            continue;
          }
          check(f.schema.node(), *it, json_path_child(path, f.key));
        }
        if (n.unknown == Unknown::kAllow) return;
        for (const auto& [key, value] : v.items()) {
          bool known = false;
          for (const Field& f : n.fields) known = known || f.key == key;
          if (known) continue;
          if (n.unknown == Unknown::kReport) {
            reported.push_back(json_path_child(path, key));
            continue;
          }
          std::string keys;
          for (const Field& f : n.fields) keys += (keys.empty() ? "" : ", ") + f.key;
          fail(json_path_child(path, key), fmt::format("unknown key (known here: {})", keys.empty() ? "none" : keys));
        }
        return;
      }
    }
  }
};

// A node of `kind`; `max_size` bounds a string's characters, an array's items or a map's keys, whose values `items`.
std::shared_ptr<Node> make(JsonKind kind, std::size_t max_size = 0, std::shared_ptr<const Node> items = nullptr) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->max_size = max_size;
  n->items = std::move(items);
  return n;
}

bool plain_key(const std::string& key) {
  if (key.empty() || std::isdigit(static_cast<unsigned char>(key[0]))) return false;
  for (unsigned char c : key)
    if (!std::isalnum(c) && c != '_') return false;
  return true;
}

}  // namespace

JsonSchema JsonSchema::any() { return JsonSchema(make(JsonKind::kAny)); }
JsonSchema JsonSchema::boolean() { return JsonSchema(make(JsonKind::kBool)); }

JsonSchema JsonSchema::string(std::size_t max_chars) { return JsonSchema(make(JsonKind::kString, max_chars)); }

JsonSchema JsonSchema::one_of(std::vector<std::string> allowed) {
  auto n = make(JsonKind::kOneOf);
  n->allowed = std::move(allowed);
  return JsonSchema(n);
}

JsonSchema JsonSchema::integer(std::int64_t min, std::uint64_t max) {
  auto n = make(JsonKind::kInteger);
  n->imin = min;
  n->imax = max;
  return JsonSchema(n);
}

JsonSchema JsonSchema::number(double min, double max, bool min_open) {
  auto n = make(JsonKind::kNumber);
  n->nmin = min;
  n->nmax = max;
  n->min_open = min_open;
  return JsonSchema(n);
}

JsonSchema JsonSchema::array(JsonSchema items, std::size_t max_items) {
  return JsonSchema(make(JsonKind::kArray, max_items, items.node_));
}

JsonSchema JsonSchema::object(std::vector<Field> fields, Unknown unknown) {
  auto n = make(JsonKind::kObject);
  n->fields = std::move(fields);
  n->unknown = unknown;
  return JsonSchema(n);
}

JsonSchema JsonSchema::map(JsonSchema values, std::size_t max_keys) {
  return JsonSchema(make(JsonKind::kMap, max_keys, values.node_));
}

JsonSchema JsonSchema::or_null() const {
  auto n = std::make_shared<Node>(*node_);
  n->nullable = true;
  return JsonSchema(n);
}

std::vector<std::string> JsonSchema::check(const nlohmann::json& doc, const std::string& origin, ErrorCode code,
                                           const std::string& path) const {
  Checker c{origin, code, {}};
  c.check(*node_, doc, path);
  return c.reported;
}

std::string json_path_child(const std::string& parent, const std::string& key) {
  if (plain_key(key)) return parent + "." + key;
  return parent + "[" + nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "]";
}

std::string json_path_index(const std::string& parent, std::size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

nlohmann::json parse_json(const std::string& text, const std::string& origin, ErrorCode code) {
  bool too_deep = false;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > kMaxJsonDepth) too_deep = true;
      return !too_deep;
    });
  } catch (const nlohmann::json::exception& e) {
    if (!too_deep) {
      // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ...": the library's prefix
      // says nothing to a user.
      std::string why = e.what();
      const std::size_t at = why.find("] ");
      if (at != std::string::npos) why = why.substr(at + 2);
      STRATA_THROW(code, "{}: not valid JSON: {}", origin, why);
    }
  }
  STRATA_CHECK_CODE(code, !too_deep, "{}: nested deeper than {} levels", origin, kMaxJsonDepth);
  return j;
}

nlohmann::json read_json_file(const std::string& path, const std::string& what, std::size_t max_bytes, ErrorCode code) {
  return parse_json(read_input_file(path, what, max_bytes), what + " " + path, code);
}

}  // namespace strata
