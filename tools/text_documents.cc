// TextDocuments: strata-data's inputs read into documents (text_documents.h).
#include "tools/text_documents.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_checks.h"

namespace strata {

namespace {

// JSONL inputs are read in pieces of this size.
constexpr std::size_t kReadBytes = std::size_t{1} << 20;

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string json_reason(const char* what) {
  std::string s = what;
  if (s.rfind("[json.exception.", 0) == 0 && s.find("] ") != std::string::npos) s.erase(0, s.find("] ") + 2);
  return s;
}

}  // namespace

std::vector<InputFile> check_inputs(const std::vector<std::string>& paths) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, !paths.empty(), "no INPUT: name .txt or .jsonl files to tokenize");
  std::vector<InputFile> inputs;
  for (const std::string& path : paths) {
    const std::string ext = std::filesystem::path(path).extension().string();
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, ext == ".txt" || ext == ".jsonl",
                      "input '{}': not a .txt or .jsonl file (a .txt file is one document, a .jsonl file one "
                      "document a line)",
                      path);
    check_input_file(path, "input");  // a missing, unreadable or non-regular file, named
    struct stat st {};
    STRATA_CHECK_CODE(ErrorCode::kIo, ::stat(path.c_str(), &st) == 0, "input '{}': {}", path, std::strerror(errno));
    inputs.push_back({path, ext == ".jsonl" ? InputKind::kJsonl : InputKind::kText,
                      static_cast<std::uint64_t>(st.st_size)});
  }
  return inputs;
}

std::string_view document_text(const RawDocument& doc, const InputFile& input, const std::string& field,
                               std::string& storage) {
  if (input.kind == InputKind::kText) return doc.bytes;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(doc.bytes);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(ErrorCode::kInvalidArgument, "{}:{}: not JSON ({})", input.path, doc.line, json_reason(e.what()));
  }
  const auto it = j.is_object() ? j.find(field) : j.end();
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, j.is_object() && it != j.end() && it->is_string(),
                    "{}:{}: no string field '{}'", input.path, doc.line, field);
  storage = std::move(it->get_ref<std::string&>());
  return storage;
}

TextDocuments::TextDocuments(std::vector<InputFile> inputs) : inputs_(std::move(inputs)) {}

TextDocuments::~TextDocuments() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t TextDocuments::total_bytes() const {
  std::uint64_t n = 0;
  for (const InputFile& f : inputs_) n += f.bytes;
  return n;
}

bool TextDocuments::open_next() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
  buffer_at_ = 0;
  eof_ = false;
  line_ = 0;
  if (++current_ >= static_cast<int>(inputs_.size())) return false;
  if (inputs_[current_].kind == InputKind::kJsonl) fd_ = open_input_file(inputs_[current_].path, "input");
  return true;
}

bool TextDocuments::next_line(std::string* line) {
  for (;;) {
    const char* begin = buffer_.data() + buffer_at_;
    const std::size_t left = buffer_.size() - buffer_at_;
    if (const void* nl = std::memchr(begin, '\n', left)) {
      const std::size_t n = static_cast<const char*>(nl) - begin;
      line->assign(begin, n);
      buffer_at_ += n + 1;
      ++line_;
      return true;
    }
    if (eof_) {
      if (left == 0) return false;
      line->assign(begin, left);  // a last line without its newline
      buffer_at_ = buffer_.size();
      ++line_;
      return true;
    }
    buffer_.erase(0, buffer_at_);
    buffer_at_ = 0;
    const std::size_t have = buffer_.size();
    buffer_.resize(have + kReadBytes);
    ssize_t got;
    do {
      got = ::read(fd_, buffer_.data() + have, kReadBytes);
    } while (got < 0 && errno == EINTR);
    STRATA_CHECK_CODE(ErrorCode::kIo, got >= 0, "input '{}': read failed after line {}: {}",
                      inputs_[current_].path, line_, std::strerror(errno));
    buffer_.resize(have + static_cast<std::size_t>(got));
    eof_ = got == 0;
  }
}

bool TextDocuments::next_batch(std::size_t max_bytes, std::vector<RawDocument>* out) {
  const std::size_t first = out->size();
  std::size_t bytes = 0;
  if (current_ < 0 && !open_next()) return false;
  while (bytes < max_bytes && current_ < static_cast<int>(inputs_.size())) {
    const InputFile& input = inputs_[current_];
    if (input.kind == InputKind::kText) {
      RawDocument doc{read_input_file(input.path, "input"), current_, 0};
      bytes += doc.bytes.size() + 1;
      out->push_back(std::move(doc));
      open_next();
      continue;
    }
    RawDocument doc{{}, current_, 0};
    if (!next_line(&doc.bytes)) {
      open_next();
      continue;
    }
    if (blank(doc.bytes)) continue;
    doc.line = line_;
    bytes += doc.bytes.size() + 1;
    out->push_back(std::move(doc));
  }
  return out->size() > first;
}

}  // namespace strata
