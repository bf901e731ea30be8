// TextDocuments: the documents of strata-data's inputs, read in input order in bounded batches: a .txt file is one
// document, a .jsonl file one document a line (a string field of a JSON object).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

enum class InputKind { kText, kJsonl };

struct InputFile {
  std::string path;
  InputKind kind = InputKind::kText;
  std::uint64_t bytes = 0;  // its size when checked (for the progress bar)
};

// The inputs named on the command line, checked before any is read: each a readable regular file named .txt or
// .jsonl. kIo naming the file otherwise.
std::vector<InputFile> check_inputs(const std::vector<std::string>& paths);

// One document as read: the whole of a text file, or one line of a JSONL file with its JSON not parsed yet (parsing
// runs on the encoding threads).
struct RawDocument {
  std::string bytes;
  int input = 0;           // index into the inputs
  std::uint64_t line = 0;  // 1-based line of a JSONL document; 0 for a text file
};

// The text of `doc`: a text file's bytes as they are, or the string `field` of a JSONL line's object (decoded into
// `storage`). kInvalidArgument "FILE:LINE: not JSON (reason)" or "FILE:LINE: no string field 'text'".
std::string_view document_text(const RawDocument& doc, const InputFile& input, const std::string& field,
                               std::string& storage);

// Reads the inputs in order. JSONL lines that are empty or only whitespace are skipped (their numbers still count).
class TextDocuments {
 public:
  explicit TextDocuments(std::vector<InputFile> inputs);
  ~TextDocuments();
  TextDocuments(const TextDocuments&) = delete;
  TextDocuments& operator=(const TextDocuments&) = delete;

  // Appends documents to `out` until at least `max_bytes` are in it or the inputs end; false when nothing was left.
  bool next_batch(std::size_t max_bytes, std::vector<RawDocument>* out);
  const std::vector<InputFile>& inputs() const { return inputs_; }
  std::uint64_t total_bytes() const;

 private:
  // Moves to the next input; false past the last.
  bool open_next();
  // The next line of the open JSONL file (without its newline); false at its end.
  bool next_line(std::string* line);

  std::vector<InputFile> inputs_;
  int current_ = -1;
  int fd_ = -1;
  std::string buffer_;       // bytes read from fd_ and not yet returned
  std::size_t buffer_at_ = 0;
  bool eof_ = false;
  std::uint64_t line_ = 0;
};

}  // namespace strata
