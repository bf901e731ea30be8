// BpeTokenizer: byte-level BPE (GPT-2, Llama 3, Qwen2) from a Hugging Face tokenizer.json.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/data/added_tokens.h"
#include "runtime/data/bpe_model.h"
#include "runtime/data/normal_form.h"
#include "runtime/data/regex_split.h"
#include "runtime/data/tokenizer.h"

namespace strata {

// Encoding runs Hugging Face's pipeline: added and special tokens are found first (leftmost-longest, in the raw
// text); the rest is split into runs of valid UTF-8 and of invalid bytes; valid runs are normalized and split by the
// pre-tokenizer's patterns into words; each word's bytes are BPE-merged. A run of invalid bytes is one word that no
// pattern or normalizer sees (docs/data.md).
class BpeTokenizer final : public Tokenizer {
 public:
  // Loads `path` (read_tokenizer_json's refusals); bos and eos come from a tokenizer_config.json beside it, if any.
  static std::unique_ptr<BpeTokenizer> load(const std::string& path);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(id_bytes_.size()); }
  std::optional<std::int32_t> token_id(std::string_view token) const override;
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  const std::string& path() const override { return path_; }

 private:
  BpeTokenizer() = default;
  void read_special_ids();
  // Encodes text that holds no added token.
  void encode_plain(std::string_view text, std::vector<std::int32_t>* out) const;
  // Splits `piece` by splits_[stage..] and encodes each word.
  void encode_split(std::string_view piece, std::size_t stage, std::vector<std::int32_t>* out) const;

  std::string path_;
  std::optional<NormalForm> normal_form_;
  std::vector<RegexSplit> splits_;
  AddedTokens added_;
  std::unique_ptr<BpeModel> model_;
  std::vector<std::string> id_bytes_;  // what each id decodes to ("" for an id the file leaves unused)
  std::unordered_map<std::string, std::int32_t> token_ids_;  // token text as the file writes it -> id
  std::optional<std::int32_t> bos_;
  std::optional<std::int32_t> eos_;
};

}  // namespace strata
