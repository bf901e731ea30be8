// strata-data: text files and JSONL in, token shards out (tokenize), and what a shard holds (inspect) (docs/data.md).
// A plain program, not an MPI job: the encoding runs on the threads of this process (tools/document_encoder.h).
#include <CLI/CLI.hpp>
#include <glob.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/tool_main.h"
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)
#include "runtime/data/token_shard.h"
#include "runtime/data/tokenizer.h"
#include "tools/document_encoder.h"
#include "tools/text_documents.h"
#include "tools/token_shard_set.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct TokenizeOptions {
  std::string tokenizer;
  std::string out;
  std::uint64_t shard_tokens = 100'000'000;
  std::uint64_t val_tokens = 0;
  int threads = 0;  // 0: every core this process may run on
  std::string field = "text";
  std::int64_t eot = -1;  // -1: the tokenizer's own
  bool force = false;
  bool no_progress = false;
  std::vector<std::string> inputs;
};

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// The end-of-text id: --eot, else the tokenizer's eos, else a token spelled as GPT-2, Llama 3 or SentencePiece spell
// theirs (a bare tokenizer.json says no eos: that is in the tokenizer_config.json beside it).
std::int32_t end_of_text(const Tokenizer& tok, std::int64_t flag) {
  if (flag >= 0) {
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, flag < tok.vocab_size(),
                      "--eot: {} is not an id of {} (its vocabulary has {} ids)", flag, tok.path(), tok.vocab_size());
    return static_cast<std::int32_t>(flag);
  }
  if (const auto eos = tok.eos_id()) return *eos;
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (const auto id = tok.token_id(name)) return *id;
  STRATA_THROW(ErrorCode::kInvalidArgument,
               "{} names no end-of-text token (no eos_token, no <|endoftext|>, <|end_of_text|> or </s>): give its id "
               "with --eot",
               tok.path());
}

// Shard stems: PREFIX_train and PREFIX_val, or DIR/train and DIR/val when --out is a directory.
std::string stem_of(const std::string& out, const char* split) {
  std::error_code ec;
  if (std::filesystem::is_directory(out, ec)) return out + (out.ends_with('/') ? "" : "/") + split;
  return out + "_" + split;
}

std::vector<std::string> existing_shards(const std::string& stem) {
  std::vector<std::string> found;
  glob_t g{};
  if (::glob((stem + "_[0-9][0-9][0-9][0-9][0-9][0-9].bin").c_str(), 0, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return found;
}

// An earlier run's shards would be read with this run's by a glob over PREFIX_train_*: refused, or removed (--force).
void clear_old_shards(const std::vector<std::string>& stems, bool force) {
  for (const std::string& stem : stems)
    for (const std::string& path : existing_shards(stem)) {
      STRATA_CHECK_CODE(ErrorCode::kIo, force,
                        "--out: {} already exists: remove the old shards, choose another prefix, or give --force",
                        path);
      std::error_code ec;
      std::filesystem::remove(path, ec);
      STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "--force: cannot remove {}: {}", path, ec.message());
    }
}

// Counts of a run, and the progress bar on stderr when it is a terminal.
class TokenizeProgress {
 public:
  // The clock starts at `start`: the summary's seconds and MB/s count loading the tokenizer and checking the inputs.
  TokenizeProgress(std::uint64_t total_bytes, bool show, Clock::time_point start)
      : total_bytes_(total_bytes), show_(show && ::isatty(STDERR_FILENO)), start_(start), last_(start_) {}

  std::uint64_t documents = 0, tokens = 0, bytes = 0;

  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double mb_per_s() const { return static_cast<double>(total_bytes_) / 1e6 / std::max(seconds(), 1e-9); }

  void update(bool last) {
    if (!show_) return;
    const Clock::time_point now = Clock::now();
    if (!last && now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    const double frac = total_bytes_ ? std::min(1.0, static_cast<double>(bytes) / total_bytes_) : 1.0;
    const int width = 30, filled = static_cast<int>(frac * width);
    const double s = std::max(seconds(), 1e-9);
    std::fprintf(stderr, "\r[%.*s%*s] %3.0f%% %llu documents %llu tokens %.1f MB/s ", filled,
                 "##############################", width - filled, "", 100 * frac,
                 static_cast<unsigned long long>(documents), static_cast<unsigned long long>(tokens),
                 static_cast<double>(bytes) / 1e6 / s);
    if (last) std::fprintf(stderr, "\n");
  }

 private:
  std::uint64_t total_bytes_;
  bool show_;
  Clock::time_point start_, last_;
};

// Writes a batch's documents in order, each followed by the end-of-text id: to val until it holds --val-tokens, then
// to train. A document whose text was refused is raised here, so the first in input order is the one reported.
struct SplitWriter {
  TokenShardSet& val;
  TokenShardSet& train;
  std::uint64_t val_tokens;
  std::uint32_t eot;
  std::uint64_t val_taken = 0;
  std::vector<std::uint32_t> staged;

  void write(const DocumentBatch& batch, TokenizeProgress& progress) {
    TokenShardSet* staged_to = nullptr;
    for (std::size_t i = 0; i < batch.docs.size(); ++i) {
      if (batch.errors[i]) std::rethrow_exception(batch.errors[i]);
      TokenShardSet* to = val_taken < val_tokens ? &val : &train;
      if (to != staged_to && staged_to) flush(staged_to);
      staged_to = to;
      const std::vector<std::int32_t>& ids = batch.ids[i];
      staged.insert(staged.end(), ids.begin(), ids.end());
      staged.push_back(eot);
      if (to == &val) val_taken += ids.size() + 1;
      progress.documents += 1;
      progress.tokens += ids.size() + 1;
      progress.bytes += batch.docs[i].bytes.size() + (batch.docs[i].line ? 1 : 0);
    }
    if (staged_to) flush(staged_to);
  }
  void flush(TokenShardSet* to) {
    to->append(staged.data(), staged.size());
    staged.clear();
  }
};

int run_tokenize(const TokenizeOptions& o) {
  const Clock::time_point start = Clock::now();
  const std::vector<InputFile> inputs = check_inputs(o.inputs);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(o.tokenizer);
  const std::uint32_t eot = static_cast<std::uint32_t>(end_of_text(*tok, o.eot));
  const int token_bytes = tok->vocab_size() <= 65536 ? 2 : 4;
  const std::string train_stem = stem_of(o.out, "train"), val_stem = stem_of(o.out, "val");
  check_output_file(TokenShardSet::shard_path(train_stem, 0), "--out", OutputKind::kReplaced);
  clear_old_shards({train_stem, val_stem}, o.force);
  const int threads = o.threads > 0 ? o.threads : cores_available();
  // A batch of about 4 MiB of text a thread: enough documents to keep every thread busy while this one reads the
  // next batch and writes the last, and memory bounded (two batches, text and ids) whatever the inputs' size.
  const std::size_t read_bytes = (std::size_t{4} << 20) * static_cast<std::size_t>(threads);

  TokenShardSet val(val_stem, o.shard_tokens, token_bytes), train(train_stem, o.shard_tokens, token_bytes);
  SplitWriter writer{val, train, o.val_tokens, eot, 0, {}};
  TextDocuments reader(inputs);
  TokenizeProgress progress(reader.total_bytes(), !o.no_progress, start);
  DocumentBatch batches[2];
  DocumentEncoder encoder(*tok, reader.inputs(), o.field, threads);  // after the batches: stopped before they go

  // Encode batch k while this thread writes batch k-1 and reads batch k+1, then helps encode k.
  DocumentBatch* current = &batches[0];
  DocumentBatch* previous = nullptr;
  reader.next_batch(read_bytes, &current->docs);
  while (!current->docs.empty()) {
    encoder.start(current);
    DocumentBatch* next = previous ? previous : &batches[1];
    if (previous) writer.write(*previous, progress);
    next->clear();
    reader.next_batch(read_bytes, &next->docs);
    encoder.finish();
    progress.update(false);
    previous = current;
    current = next;
  }
  if (previous) writer.write(*previous, progress);
  val.finish();
  train.finish();
  progress.update(true);

  std::printf(
      "strata-data tokenize: %llu documents, %llu tokens (train %llu in %d shard(s), val %llu in %d shard(s), %s), "
      "%.2f s, %.2f MB/s, %d thread(s)\n",
      static_cast<unsigned long long>(progress.documents), static_cast<unsigned long long>(progress.tokens),
      static_cast<unsigned long long>(train.tokens()), train.shards(), static_cast<unsigned long long>(val.tokens()),
      val.shards(), token_bytes == 2 ? "uint16" : "uint32", progress.seconds(), progress.mb_per_s(), threads);
  return 0;
}

// Decoded text on one line: newlines, tabs, quotes and other control bytes escaped, UTF-8 as it is.
std::string escaped(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"' || c == '\\') out += std::string("\\") + static_cast<char>(c);
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

// The index of the first id at or above `vocab`, or size(): read in bounded pieces, not through the mapping, so no
// page of a large shard stays resident.
std::uint64_t first_outside(const MappedShard& shard, std::uint32_t vocab) {
  constexpr std::uint64_t kPiece = std::uint64_t{1} << 20;
  std::vector<std::uint32_t> piece;
  for (std::uint64_t at = 0; at < shard.size(); at += kPiece) {
    piece.resize(static_cast<std::size_t>(std::min(kPiece, shard.size() - at)));
    shard.read(at, piece.size(), piece.data());
    for (std::size_t i = 0; i < piece.size(); ++i)
      if (piece[i] >= vocab) return at + i;
  }
  return shard.size();
}

int run_inspect(const std::vector<std::string>& files, int first, const std::string& tokenizer, bool decode) {
  std::unique_ptr<Tokenizer> tok;
  if (!tokenizer.empty()) tok = load_tokenizer(tokenizer);
  std::size_t name_width = 6;
  for (const std::string& f : files) name_width = std::max(name_width, f.size());
  std::printf("%-*s %-12s %6s %14s  %s%s\n", static_cast<int>(name_width + 2), "# file", "format", "width", "tokens",
              tok ? "in vocab  " : "", "first tokens");
  std::uint64_t total = 0;
  int bad = 0;
  for (const std::string& path : files) {
    const MappedShard shard(path);
    const ShardInfo& info = shard.info();
    const std::uint64_t n = std::min<std::uint64_t>(shard.size(), static_cast<std::uint64_t>(first));
    std::vector<std::uint32_t> head(n);
    shard.copy(0, n, head.data());
    std::string vocab_cell;
    if (tok) {
      const std::uint64_t at = first_outside(shard, static_cast<std::uint32_t>(tok->vocab_size()));
      vocab_cell = at == shard.size() ? "yes" : fmt::format("no: {} at {}", shard.at(at), at);
      bad += at != shard.size();
    }
    std::printf("%-*s %-12s %6s %14llu  %s%s[%s%s]\n", static_cast<int>(name_width + 2), path.c_str(),
                shard_format_name(info.format), info.token_bytes == 2 ? "uint16" : "uint32",
                static_cast<unsigned long long>(info.tokens), vocab_cell.c_str(), tok ? "  " : "",
                fmt::format("{}", fmt::join(head, " ")).c_str(), shard.size() > n ? " ..." : "");
    if (decode) {
      std::vector<std::int32_t> ids;
      for (const std::uint32_t t : head)
        if (t < static_cast<std::uint32_t>(tok->vocab_size())) ids.push_back(static_cast<std::int32_t>(t));
      std::printf("  text: %s\n", escaped(tok->decode(ids)).c_str());
    }
    total += info.tokens;
  }
  std::printf("# %zu shard(s), %llu tokens%s\n", files.size(), static_cast<unsigned long long>(total),
              !tok ? "" : bad ? fmt::format(", {} with ids outside the vocabulary of {}", bad, tok->vocab_size()).c_str()
                              : fmt::format(", every id in the vocabulary of {}", tok->vocab_size()).c_str());
  return bad ? 1 : 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app{"strata-data: text and JSONL to token shards, and what a shard holds (docs/data.md)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  namespace flags = strata::flags;

  strata::TokenizeOptions o;
  CLI::App* tokenize = app.add_subcommand("tokenize", "encode .txt and .jsonl files into token shards");
  tokenize->add_option("--tokenizer", o.tokenizer, "a tokenizer.json, a tokenizer.model, or a model directory")
      ->required();
  tokenize->add_option("--out", o.out, "output prefix: PREFIX_train_000000.bin, PREFIX_val_000000.bin, ... (a "
                                       "directory: DIR/train_000000.bin, ...)")
      ->required();
  tokenize->add_option("--shard-tokens", o.shard_tokens, "tokens a shard (the last one of a split holds fewer)")
      ->check(flags::unsigned_integer(1))
      ->capture_default_str();
  tokenize->add_option("--val-tokens", o.val_tokens,
                       "the first documents, until they hold this many tokens, go to the val split")
      ->check(flags::unsigned_integer(0))
      ->capture_default_str();
  tokenize->add_option("--threads", o.threads, "encoding threads (default: every core this process may use)")
      ->check(flags::thread_count());
  tokenize->add_option("--field", o.field, "the JSONL field holding a document's text")->capture_default_str();
  tokenize->add_option("--eot", o.eot, "the id written after each document (default: the tokenizer's end of text)")
      ->check(flags::integer(0));
  tokenize->add_flag("--force", o.force, "remove shards an earlier run left at --out");
  tokenize->add_flag("--no-progress", o.no_progress, "no progress bar (it is shown only when stderr is a terminal)");
  tokenize->add_option("INPUT", o.inputs, ".txt files (one document each) and .jsonl files (one a line)")->required();

  std::vector<std::string> files;
  std::string tokenizer;
  int first = 8;
  bool decode = false;
  CLI::App* inspect = app.add_subcommand("inspect", "each shard's format, token width, count and first tokens");
  inspect->add_option("FILE", files, "token shards (strata, llm.c or plain uint16)")->required();
  inspect->add_option("--first", first, "how many of the first tokens to show")
      ->check(flags::integer(0))
      ->capture_default_str();
  CLI::Option* tok_opt =
      inspect->add_option("--tokenizer", tokenizer, "check every id against its vocabulary (and --decode with it)");
  inspect->add_flag("--decode", decode, "print the first tokens as text")->needs(tok_opt);
  CLI11_PARSE(app, argc, argv);

  return strata::run_tool("strata-data", [&] {
    if (tokenize->parsed()) return strata::run_tokenize(o);
    return strata::run_inspect(files, first, tokenizer, decode);
  });
}
