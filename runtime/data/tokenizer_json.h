// TokenizerJson: what Strata reads of a Hugging Face tokenizer.json, checked once; anything it cannot run is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/normal_form.h"

namespace strata {

struct TokenizerJson {
  struct SplitPattern {
    std::string pattern;
    bool literal;  // {"String": ...} rather than {"Regex": ...}
  };
  struct AddedToken {
    std::string content;
    std::int32_t id;
    bool special;
  };

  std::optional<NormalForm> normal_form;  // the normalizer: none, or one Unicode normal form
  std::vector<SplitPattern> splits;       // the pre-tokenizer's splits, in order (ByteLevel's use_regex is the last)
  std::vector<std::pair<std::string, std::int32_t>> vocab;  // byte-level token text -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  bool ignore_merges = false;
  std::vector<AddedToken> added_tokens;
};

// Reads `path`. A model type, normalizer, pre-tokenizer, decoder or option that byte-level BPE as Strata runs it does
// not cover is kUnsupported naming the file and the value ("t.json: model type \"WordPiece\" is not supported ...");
// a file that is not JSON or lacks a field kInvalidArgument; a missing or unreadable one kIo.
TokenizerJson read_tokenizer_json(const std::string& path);

}  // namespace strata
