// SentencePieceTokenizer over sentencepiece::SentencePieceProcessor, with its Status turned into strata::Error.
#include "runtime/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"
#include "core/file_checks.h"

namespace strata {

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  constexpr std::size_t kMaxModelBytes = std::size_t{1} << 30;
  const std::string bytes = read_input_file(path, "tokenizer model", kMaxModelBytes);
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->path_ = path;
  t->processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = t->processor_->LoadFromSerializedProto(bytes);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, status.ok(), "{}: not a SentencePiece model: {}", path,
                    status.ToString());
  return t;
}

std::vector<std::int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  STRATA_CHECK_CODE(ErrorCode::kInternal, status.ok(), "{}: SentencePiece encode of {} bytes failed: {}", path_,
                    text.size(), status.ToString());
  return std::vector<std::int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const std::int32_t> ids) const {
  const std::int32_t size = vocab_size();
  for (const std::int32_t id : ids)
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, id >= 0 && id < size, "{}: token id {} is outside the vocab [0, {})",
                      path_, id, size);
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  STRATA_CHECK_CODE(ErrorCode::kInternal, status.ok(), "{}: SentencePiece decode of {} ids failed: {}", path_,
                    ids.size(), status.ToString());
  return text;
}

std::int32_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::optional<std::int32_t> SentencePieceTokenizer::token_id(std::string_view token) const {
  const int id = processor_->PieceToId(token);
  // PieceToId answers unk for a piece it does not know: only the unk piece itself may have that id.
  if (processor_->IsUnknown(id) && processor_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

std::optional<std::int32_t> SentencePieceTokenizer::bos_id() const {
  const int id = processor_->bos_id();
  return id >= 0 ? std::optional<std::int32_t>(id) : std::nullopt;
}

std::optional<std::int32_t> SentencePieceTokenizer::eos_id() const {
  const int id = processor_->eos_id();
  return id >= 0 ? std::optional<std::int32_t>(id) : std::nullopt;
}

}  // namespace strata
