// Tokenizer: text to token ids and back, for the tokenizer files models ship; load_tokenizer finds and loads one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// A loaded tokenizer: immutable after construction, so encode and decode may run on many threads at once.
// Text is bytes: encode takes any bytes (invalid UTF-8 included, see docs/data.md for what each kind does with them)
// and decode returns the bytes the ids stand for, unreplaced.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, with no start or end tokens added (Hugging Face's add_special_tokens=False). Special tokens
  // written in the text become their ids.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The bytes of `ids` concatenated (special tokens included); an id outside [0, vocab_size()) is kInvalidArgument.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  // One past the largest id (the embedding table's rows).
  virtual std::int32_t vocab_size() const = 0;
  // The id of a token written as the tokenizer file writes it ("<|endoftext|>", "<s>", "Ġthe", "▁the").
  virtual std::optional<std::int32_t> token_id(std::string_view token) const = 0;
  // The begin- and end-of-sequence ids where the files say which they are.
  virtual std::optional<std::int32_t> bos_id() const = 0;
  virtual std::optional<std::int32_t> eos_id() const = 0;
  // The file it was loaded from.
  virtual const std::string& path() const = 0;
};

// Loads `path`: a Hugging Face tokenizer.json (byte-level BPE), a SentencePiece .model, a model directory holding one
// (tokenizer.json first), or the config.json of such a directory. Unsupported contents are kUnsupported naming the
// file and the field's value; a missing or unreadable file kIo; a damaged one kInvalidArgument.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace strata
