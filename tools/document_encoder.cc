// DocumentEncoder: a batch of documents encoded on N threads (document_encoder.h).
#include "tools/document_encoder.h"

#include <algorithm>
#include <future>

namespace strata {

namespace {
// Documents taken at once: few enough that the last ones of a batch spread over the threads, enough that the lock is
// taken rarely for JSONL's short lines.
constexpr std::size_t kTake = 4;
}  // namespace

DocumentEncoder::DocumentEncoder(const Tokenizer& tokenizer, const std::vector<InputFile>& inputs, std::string field,
                                 int threads)
    : tokenizer_(tokenizer), inputs_(inputs), field_(std::move(field)) {
  std::vector<std::future<std::unique_ptr<Tokenizer>>> loads;
  for (int i = 1; i < threads; ++i)
    loads.push_back(std::async(std::launch::async, [&tokenizer] { return load_tokenizer(tokenizer.path()); }));
  for (auto& load : loads) copies_.push_back(load.get());
  for (const auto& copy : copies_) workers_.emplace_back([this, t = copy.get()] { worker_loop(*t); });
}

DocumentEncoder::~DocumentEncoder() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    if (batch_) next_ = batch_->docs.size();  // nothing more is taken
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void DocumentEncoder::start(DocumentBatch* batch) {
  batch->ids.assign(batch->docs.size(), {});
  batch->errors.assign(batch->docs.size(), nullptr);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    batch_ = batch;
    next_ = 0;
    ++generation_;
    busy_ = static_cast<int>(workers_.size());
  }
  wake_.notify_all();
}

void DocumentEncoder::finish() {
  encode_some(tokenizer_);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return busy_ == 0; });
  batch_ = nullptr;
}

void DocumentEncoder::encode_some(const Tokenizer& tokenizer) {
  std::string storage;
  for (;;) {
    std::size_t begin, end;
    DocumentBatch* batch;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      batch = batch_;
      if (!batch || next_ >= batch->docs.size()) return;
      begin = next_;
      end = std::min(begin + kTake, batch->docs.size());
      next_ = end;
    }
    for (std::size_t i = begin; i < end; ++i) {
      const RawDocument& doc = batch->docs[i];
      try {
        batch->ids[i] = tokenizer.encode(document_text(doc, inputs_[doc.input], field_, storage));
      } catch (...) {
        batch->errors[i] = std::current_exception();
      }
    }
  }
}

void DocumentEncoder::worker_loop(const Tokenizer& tokenizer) {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    encode_some(tokenizer);
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      --busy_;
    }
    done_.notify_one();
  }
}

}  // namespace strata
