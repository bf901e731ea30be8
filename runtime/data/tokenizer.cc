// load_tokenizer: which tokenizer file a path means, and which Tokenizer reads it.
#include "runtime/data/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "runtime/data/bpe_tokenizer.h"
#include "runtime/data/sentencepiece_tokenizer.h"

namespace strata {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  if (p.filename() == "config.json") p = p.parent_path();  // a model's config.json: its tokenizer lies beside it
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json", ec)) return BpeTokenizer::load((p / "tokenizer.json").string());
    if (fs::exists(p / "tokenizer.model", ec)) return SentencePieceTokenizer::load((p / "tokenizer.model").string());
    STRATA_THROW(ErrorCode::kIo, "{}: no tokenizer.json or tokenizer.model in the directory", p.string());
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, fs::exists(p, ec), "{}: no such tokenizer file or model directory", path);
  if (p.extension() == ".json") return BpeTokenizer::load(path);
  if (p.extension() == ".model") return SentencePieceTokenizer::load(path);
  STRATA_THROW(ErrorCode::kUnsupported,
               "{}: not a tokenizer file by its name (a tokenizer.json, a SentencePiece .model, or a model directory)",
               path);
}

}  // namespace strata
