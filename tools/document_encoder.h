// DocumentEncoder: encodes a batch of documents on N threads, the calling thread being one of them, so that the
// caller can read and write files while the others encode (strata-data tokenize).
//
// Each worker encodes with a Tokenizer of its own, loaded from the same file: a shared one scales no further than one
// thread, since BpeModel's word cache sits behind one mutex taken for every word (at 2 threads: ~6,000 futex sleeps
// in a 0.5 s run and no speed-up). The copies cost a load each, run in parallel (0.07 s and ~10 MB for a 16k vocab).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/data/tokenizer.h"
#include "tools/text_documents.h"

namespace strata {

// A batch's documents and, once encoded, each one's ids or the error its text gave (raised in input order by the
// writer, so that the first bad line of the input is the one reported, whatever the thread count).
struct DocumentBatch {
  std::vector<RawDocument> docs;
  std::vector<std::vector<std::int32_t>> ids;
  std::vector<std::exception_ptr> errors;
  void clear() {
    docs.clear();
    ids.clear();
    errors.clear();
  }
};

class DocumentEncoder {
 public:
  // `threads` in all: threads - 1 workers are started here, each with its own copy of `tokenizer` (loaded from its
  // path(); a failed load is thrown here).
  DocumentEncoder(const Tokenizer& tokenizer, const std::vector<InputFile>& inputs, std::string field, int threads);
  ~DocumentEncoder();  // stops the workers (an unfinished batch is abandoned)
  DocumentEncoder(const DocumentEncoder&) = delete;
  DocumentEncoder& operator=(const DocumentEncoder&) = delete;

  // Starts encoding `batch` on the workers; the caller then does its own work and calls finish().
  void start(DocumentBatch* batch);
  // The caller encodes documents of the started batch too, until none is left, then waits for the workers.
  void finish();

 private:
  void worker_loop(const Tokenizer& tokenizer);
  // Encodes documents of the current batch until none is left.
  void encode_some(const Tokenizer& tokenizer);

  const Tokenizer& tokenizer_;
  const std::vector<InputFile>& inputs_;
  std::string field_;
  std::vector<std::unique_ptr<Tokenizer>> copies_;  // the workers' tokenizers
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  DocumentBatch* batch_ = nullptr;
  std::size_t next_ = 0;         // the next document to take (under mutex_)
  std::uint64_t generation_ = 0; // counts start() calls
  int busy_ = 0;                 // workers still on the current batch
  bool stop_ = false;
};

}  // namespace strata
