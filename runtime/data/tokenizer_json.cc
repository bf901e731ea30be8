// The checks of a tokenizer.json: each section parsed by one function that names what it refuses.
#include "runtime/data/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_schema.h"
#include "runtime/data/regex_split.h"

namespace strata {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxTokenizerJsonBytes = std::size_t{1} << 30;

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "(no type)";
  return j["type"].get<std::string>();
}

bool flag(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

bool set_and_nonempty(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null() && !(j[key].is_string() && j[key].get<std::string>().empty());
}

void read_normalizer(const json& n, const std::string& path, TokenizerJson* out) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    const json& list = n["normalizers"];
    STRATA_CHECK_CODE(ErrorCode::kUnsupported, list.size() <= 1,
                      "{}: normalizer Sequence of {} normalizers is not supported (none or one Unicode normal form: "
                      "NFC, NFD, NFKC, NFKD)",
                      path, list.size());
    if (list.size() == 1) read_normalizer(list[0], path, out);
    return;
  }
  out->normal_form = normal_form_named(type);
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, out->normal_form.has_value(),
                    "{}: normalizer \"{}\" is not supported (none, NFC, NFD, NFKC or NFKD)", path, type);
}

void read_split(const json& p, const std::string& path, TokenizerJson* out) {
  const std::string behavior = p.value("behavior", std::string("(none)"));
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, behavior == "Isolated",
                    "{}: pre-tokenizer Split with behavior \"{}\" is not supported (Isolated only)", path, behavior);
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, !flag(p, "invert"),
                    "{}: pre-tokenizer Split with invert true is not supported", path);
  const json& pattern = p.contains("pattern") ? p["pattern"] : json();
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    out->splits.push_back({pattern["Regex"].get<std::string>(), false});
  } else if (pattern.contains("String") && pattern["String"].is_string()) {
    out->splits.push_back({pattern["String"].get<std::string>(), true});
  } else {
    STRATA_THROW(ErrorCode::kInvalidArgument, "{}: pre-tokenizer Split has no pattern (Regex or String)", path);
  }
}

void read_byte_level(const json& p, const std::string& path, TokenizerJson* out) {
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, !flag(p, "add_prefix_space"),
                    "{}: pre-tokenizer ByteLevel with add_prefix_space true is not supported", path);
  if (!p.contains("use_regex") || flag(p, "use_regex")) out->splits.push_back({RegexSplit::gpt2_pattern(), false});
}

// The pre-tokenizer: Split stages in order, then one ByteLevel (alone, or last of a Sequence).
void read_pre_tokenizer(const json& p, const std::string& path, TokenizerJson* out) {
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, !p.is_null(),
                    "{}: pre_tokenizer null is not supported (byte-level BPE needs a ByteLevel pre-tokenizer)", path);
  std::vector<json> stages;
  if (type_of(p) == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    for (const json& s : p["pretokenizers"]) stages.push_back(s);
  } else {
    stages.push_back(p);
  }
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string type = type_of(stages[i]);
    const bool last = i + 1 == stages.size();
    if (type == "Split" && !last) {
      read_split(stages[i], path, out);
    } else if (type == "ByteLevel" && last) {
      read_byte_level(stages[i], path, out);
    } else {
      STRATA_THROW(ErrorCode::kUnsupported,
                   "{}: pre-tokenizer \"{}\" {} is not supported (ByteLevel, or a Sequence of Split with behavior "
                   "Isolated then ByteLevel)",
                   path, type, last ? "as the last stage" : "before the last stage");
    }
  }
}

void read_model(const json& m, const std::string& path, TokenizerJson* out) {
  const std::string type = type_of(m);
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, type == "BPE",
                    "{}: model type \"{}\" is not supported (byte-level BPE only; SentencePiece models load from "
                    "tokenizer.model)",
                    path, type);
  STRATA_CHECK_CODE(ErrorCode::kUnsupported,
                    !m.contains("dropout") || m["dropout"].is_null() ||
                        (m["dropout"].is_number() && m["dropout"].get<double>() == 0.0),
                    "{}: BPE dropout {} is not supported", path, m.contains("dropout") ? m["dropout"].dump() : "");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    STRATA_CHECK_CODE(ErrorCode::kUnsupported, !set_and_nonempty(m, key), "{}: BPE {} {} is not supported", path, key,
                      m[key].dump());
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, !flag(m, "byte_fallback"),
                    "{}: BPE byte_fallback true is not supported (a SentencePiece-style BPE: load its "
                    "tokenizer.model)",
                    path);
  out->ignore_merges = flag(m, "ignore_merges");
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, m.contains("vocab") && m["vocab"].is_object(),
                    "{}: model.vocab is not an object", path);
  for (const auto& [token, id] : m["vocab"].items()) {
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                      id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < INT32_MAX,
                      "{}: model.vocab[\"{}\"] is not an id: {}", path, token, id.dump());
    out->vocab.emplace_back(token, id.get<std::int32_t>());
  }
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, m.contains("merges") && m["merges"].is_array(),
                    "{}: model.merges is not an array", path);
  for (const json& merge : m["merges"]) {
    if (merge.is_string()) {  // "left right", the format before tokenizers 0.20
      const std::string s = merge.get<std::string>();
      const auto space = s.find(' ');
      STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                        space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                        "{}: merge \"{}\" is not two tokens separated by one space", path, s);
      out->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                        merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
                        "{}: merge {} is not a pair of tokens", path, merge.dump());
      out->merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    }
  }
}

void read_added_tokens(const json& list, const std::string& path, TokenizerJson* out) {
  if (list.is_null()) return;
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, list.is_array(), "{}: added_tokens is not an array", path);
  for (const json& t : list) {
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                      t.is_object() && t.contains("content") && t["content"].is_string() && t.contains("id") &&
                          t["id"].is_number_integer() && t["id"].get<std::int64_t>() >= 0 &&
                          t["id"].get<std::int64_t>() < INT32_MAX,
                      "{}: added token {} has no content or id", path, t.dump());
    const std::string content = t["content"].get<std::string>();
    for (const char* key : {"lstrip", "rstrip", "single_word"})
      STRATA_CHECK_CODE(ErrorCode::kUnsupported, !flag(t, key), "{}: added token \"{}\" with {} true is not supported",
                        path, content, key);
    out->added_tokens.push_back({content, t["id"].get<std::int32_t>(), flag(t, "special")});
  }
}

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& path) {
  const json doc = read_json_file(path, "tokenizer file", kMaxTokenizerJsonBytes);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, doc.is_object() && doc.contains("model"),
                    "{}: not a tokenizer.json (no \"model\")", path);
  TokenizerJson out;
  try {
    read_model(doc["model"], path, &out);
    read_normalizer(doc.value("normalizer", json()), path, &out);
    read_pre_tokenizer(doc.value("pre_tokenizer", json()), path, &out);
    const json decoder = doc.value("decoder", json());
    STRATA_CHECK_CODE(ErrorCode::kUnsupported, decoder.is_null() || type_of(decoder) == "ByteLevel",
                      "{}: decoder \"{}\" is not supported (ByteLevel)", path, type_of(decoder));
    read_added_tokens(doc.value("added_tokens", json()), path, &out);
  } catch (const json::exception& e) {  // a field of the wrong JSON type where the checks above read it
    STRATA_THROW(ErrorCode::kInvalidArgument, "{}: not a tokenizer.json: {}", path, e.what());
  }
  return out;
}

}  // namespace strata
