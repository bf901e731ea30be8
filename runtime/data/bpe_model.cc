// BPE merges over a linked list of symbols and a min-heap of candidate pairs: O(n log n) in the word's bytes.
#include "runtime/data/bpe_model.h"

#include <queue>

namespace strata {
namespace {

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

struct Symbol {
  std::int32_t id;
  std::int32_t prev;  // -1 at the start
  std::int32_t next;  // -1 at the end
  bool alive;
};

struct Candidate {
  std::uint32_t rank;
  std::int32_t pos;  // the left symbol
  std::int32_t merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

BpeModel::BpeModel(const std::array<std::int32_t, 256>& byte_ids, const std::vector<Merge>& merges, bool ignore_merges,
                   std::unordered_map<std::string, std::int32_t> words)
    : byte_ids_(byte_ids), ignore_merges_(ignore_merges) {
  ranks_.reserve(merges.size());
  for (std::size_t r = 0; r < merges.size(); ++r)  // a repeated pair keeps its last rank, as Hugging Face's map does
    ranks_[pair_key(merges[r].left, merges[r].right)] = Ranked{static_cast<std::uint32_t>(r), merges[r].merged};
  for (auto& [word, id] : words) words_.emplace(word, id);
}

void BpeModel::encode_word(std::string_view word, std::vector<std::int32_t>* out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    out->push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = words_.find(word); it != words_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    const std::shared_lock<std::shared_mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out->size();
  merge(word, out);
  if (cacheable) {
    const std::unique_lock<std::shared_mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheWords)
      cache_.emplace(std::string(word), std::vector<std::int32_t>(out->begin() + first, out->end()));
  }
}

void BpeModel::merge(std::string_view word, std::vector<std::int32_t>* out) const {
  const auto n = static_cast<std::int32_t>(word.size());
  std::vector<Symbol> symbols(word.size());
  for (std::int32_t i = 0; i < n; ++i)
    symbols[i] = Symbol{byte_ids_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](std::int32_t pos) {
    if (pos < 0 || symbols[pos].next < 0) return;
    const auto it = ranks_.find(pair_key(symbols[pos].id, symbols[symbols[pos].next].id));
    if (it != ranks_.end()) heap.push(Candidate{it->second.rank, pos, it->second.merged});
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Stale when either side changed since the pair was pushed: the pair now there must still be this merge.
    const auto it = ranks_.find(pair_key(left.id, symbols[left.next].id));
    if (it == ranks_.end() || it->second.rank != top.rank) continue;
    Symbol& right = symbols[left.next];
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace strata
