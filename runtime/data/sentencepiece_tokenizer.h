// SentencePieceTokenizer: a SentencePiece .model (Llama 2, Mistral) run by libsentencepiece's processor.
#pragma once

#include <memory>
#include <string>

#include "runtime/data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace strata {

// Encode and decode are SentencePieceProcessor's (its normalizer, its dummy prefix, its byte fallback): the ids
// equal those of the sentencepiece Python module on the same model. bos and eos are the model's own.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads `path`; a file the library cannot parse is kInvalidArgument with the library's reason.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override;
  std::optional<std::int32_t> token_id(std::string_view token) const override;
  std::optional<std::int32_t> bos_id() const override;
  std::optional<std::int32_t> eos_id() const override;
  const std::string& path() const override { return path_; }

 private:
  SentencePieceTokenizer() = default;
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace strata
