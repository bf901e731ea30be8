// BpeTokenizer: the tokenizer.json's parts composed into Hugging Face's encode pipeline, and decode by byte table.
#include "runtime/data/bpe_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_schema.h"
#include "runtime/data/byte_level.h"
#include "runtime/data/tokenizer_json.h"
#include "runtime/data/utf8_runs.h"

namespace strata {
namespace {

// The model: each byte's id, the merges as ids, and (for ignore_merges) whole tokens by their bytes.
std::unique_ptr<BpeModel> build_model(const TokenizerJson& config, const std::string& path) {
  std::unordered_map<std::string, std::int32_t> by_text(config.vocab.begin(), config.vocab.end());
  std::array<std::int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const auto it = by_text.find(byte_level_chars()[b]);
    STRATA_CHECK_CODE(ErrorCode::kUnsupported, it != by_text.end(),
                      "{}: the vocab lacks byte 0x{:02x} (\"{}\"): not a byte-level BPE vocab", path, b,
                      byte_level_chars()[b]);
    byte_ids[b] = it->second;
  }
  std::vector<BpeModel::Merge> merges;
  merges.reserve(config.merges.size());
  for (const auto& [left, right] : config.merges) {
    const auto l = by_text.find(left);
    const auto r = by_text.find(right);
    const auto m = by_text.find(left + right);
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, l != by_text.end() && r != by_text.end() && m != by_text.end(),
                      "{}: merge \"{} {}\" names a token that is not in the vocab", path, left, right);
    merges.push_back(BpeModel::Merge{l->second, r->second, m->second});
  }
  std::unordered_map<std::string, std::int32_t> words;
  if (config.ignore_merges) {
    for (const auto& [token, id] : config.vocab)
      if (auto bytes = byte_level_decode(token)) words.emplace(std::move(*bytes), id);
  }
  return std::make_unique<BpeModel>(byte_ids, merges, config.ignore_merges, std::move(words));
}

// "<s>" or {"content": "<s>", ...} or null, as tokenizer_config.json writes bos_token and eos_token.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::load(const std::string& path) {
  const TokenizerJson config = read_tokenizer_json(path);
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->path_ = path;
  t->normal_form_ = config.normal_form;
  for (const auto& split : config.splits) t->splits_.emplace_back(split.pattern, split.literal, path);
  t->model_ = build_model(config, path);

  std::int32_t size = 0;
  for (const auto& [token, id] : config.vocab) size = std::max(size, id + 1);
  for (const auto& added : config.added_tokens) size = std::max(size, added.id + 1);
  t->id_bytes_.resize(static_cast<std::size_t>(size));
  // Hugging Face's ByteLevel decoder: a token's characters mapped back to bytes, or its UTF-8 when one is not
  // byte-level. Added tokens override model tokens of the same id, as in its id_to_token.
  for (const auto& [token, id] : config.vocab) {
    t->id_bytes_[id] = byte_level_decode(token).value_or(token);
    t->token_ids_.emplace(token, id);
  }
  for (const auto& added : config.added_tokens) {
    t->id_bytes_[added.id] = byte_level_decode(added.content).value_or(added.content);
    t->token_ids_[added.content] = added.id;
    t->added_.add(added.content, added.id);
  }
  t->read_special_ids();
  return t;
}

void BpeTokenizer::read_special_ids() {
  const auto config_path = std::filesystem::path(path_).parent_path() / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) return;
  const auto config = read_json_file(config_path.string(), "tokenizer config", std::size_t{64} << 20);
  if (const auto bos = config_token(config, "bos_token")) bos_ = token_id(*bos);
  if (const auto eos = config_token(config, "eos_token")) eos_ = token_id(*eos);
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::size_t at = 0;
  while (at < text.size()) {
    const AddedTokens::Match m = added_.find(text, at);
    encode_plain(text.substr(at, m.pos - at), &out);
    if (m.len == 0) break;
    out.push_back(m.id);
    at = m.pos + m.len;
  }
  return out;
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<std::int32_t>* out) const {
  std::string normalized;
  while (!text.empty()) {
    const std::size_t valid = valid_utf8_prefix(text);
    if (valid > 0) {
      std::string_view run = text.substr(0, valid);
      if (normal_form_) {
        normalized.clear();
        append_normalized(*normal_form_, run, &normalized);
        run = normalized;
      }
      encode_split(run, 0, out);
      text.remove_prefix(valid);
    }
    const std::size_t invalid = invalid_utf8_prefix(text);
    model_->encode_word(text.substr(0, invalid), out);
    text.remove_prefix(invalid);
  }
}

void BpeTokenizer::encode_split(std::string_view piece, std::size_t stage, std::vector<std::int32_t>* out) const {
  if (stage == splits_.size()) {
    model_->encode_word(piece, out);
    return;
  }
  std::vector<std::string_view> pieces;
  splits_[stage].split(piece, &pieces);
  for (const std::string_view p : pieces) encode_split(p, stage + 1, out);
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (const std::int32_t id : ids) {
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, id >= 0 && id < vocab_size(),
                      "{}: token id {} is outside the vocab [0, {})", path_, id, vocab_size());
    out += id_bytes_[static_cast<std::size_t>(id)];
  }
  return out;
}

std::optional<std::int32_t> BpeTokenizer::token_id(std::string_view token) const {
  const auto it = token_ids_.find(std::string(token));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace strata
