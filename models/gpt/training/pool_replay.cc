// PoolReplay: ShardedModel's unshard / reshard and prepare / reduce / finish along one rank's schedule, counted.
#include "models/gpt/training/pool_replay.h"

#include <algorithm>

namespace strata::gpt {

namespace {

class Replay {
 public:
  Replay(const GptStageUnits& u, int prefetch) : u_(u), prefetch_(prefetch) {
    const int n = u.first.back();
    gathered_.assign(static_cast<std::size_t>(n), false);
    grads_.assign(static_cast<std::size_t>(n), kNone);
    forwards_.assign(static_cast<std::size_t>(n), 0);
  }
  PoolPeaks peaks() const { return peaks_; }
  bool keep = false, last_of_chunk = false;

  void forward(int chunk) {
    const bool first = chunk == 0 && u_.emb >= 0;
    const bool last = chunk + 1 == u_.chunks() && u_.lnf >= 0;
    if (first) begin_forward(u_.emb, chunk);
    for (int i = u_.first[static_cast<std::size_t>(chunk)]; i < u_.first[static_cast<std::size_t>(chunk) + 1]; ++i) {
      if (i == u_.emb || i == u_.lnf || i == u_.head) continue;
      begin_forward(i, chunk);
      end_forward(i);
    }
    if (last) {
      begin_forward(u_.lnf, chunk);
      end_forward(u_.lnf);
      if (!first) {
        begin_forward(u_.head, chunk);
        end_forward(u_.head);
      }
    }
    if (first) end_forward(u_.emb);
  }

  void backward(int chunk) {
    const bool first = chunk == 0 && u_.emb >= 0;
    const bool last = chunk + 1 == u_.chunks() && u_.lnf >= 0;
    if (first || last) begin_backward(first ? u_.emb : u_.head, chunk);
    if (last) {
      begin_backward(u_.lnf, chunk);
      end_backward(u_.lnf);
      if (!first) end_backward(u_.head);
    }
    for (int i = u_.first[static_cast<std::size_t>(chunk) + 1] - 1; i >= u_.first[static_cast<std::size_t>(chunk)]; --i) {
      if (i == u_.emb || i == u_.lnf || i == u_.head) continue;
      begin_backward(i, chunk);
      end_backward(i);
    }
    if (first) end_backward(u_.emb);
  }

  void finish_step() {
    for (std::size_t i = 0; i < grads_.size(); ++i) finish_reduce(static_cast<int>(i));
    std::fill(gathered_.begin(), gathered_.end(), false);
    params_in_use_ = 0;
  }

 private:
  enum Grads { kNone, kHeld, kReducing };

  void gather(int i) {
    if (gathered_[static_cast<std::size_t>(i)]) return;
    gathered_[static_cast<std::size_t>(i)] = true;
    peaks_.params = std::max(peaks_.params, ++params_in_use_);
  }
  void reshard(int i) {
    if (!gathered_[static_cast<std::size_t>(i)]) return;
    gathered_[static_cast<std::size_t>(i)] = false;
    --params_in_use_;
  }
  // The units ahead of i (forward: after it; backward: before it) within its chunk.
  void prefetch(int i, int chunk, int step) {
    const int lo = u_.first[static_cast<std::size_t>(chunk)], hi = u_.first[static_cast<std::size_t>(chunk) + 1];
    for (int k = 1; k <= prefetch_; ++k)
      if (i + step * k >= lo && i + step * k < hi) gather(i + step * k);
  }
  void begin_forward(int i, int chunk) {
    gather(i);
    prefetch(i, chunk, +1);
  }
  void end_forward(int i) {
    ++forwards_[static_cast<std::size_t>(i)];
    if (!keep) reshard(i);
  }
  void begin_backward(int i, int chunk) {
    gather(i);
    prefetch(i, chunk, -1);
    finish_reduce(i);
    if (grads_[static_cast<std::size_t>(i)] == kNone) {
      grads_[static_cast<std::size_t>(i)] = kHeld;
      peaks_.grads = std::max(peaks_.grads, ++grads_in_use_);
    }
  }
  void end_backward(int i) {
    const bool sync = !keep || last_of_chunk;
    if (sync) grads_[static_cast<std::size_t>(i)] = kReducing;
    if (last_reduced_ >= 0 && last_reduced_ != i) finish_reduce(last_reduced_);
    last_reduced_ = sync ? i : -1;
    if (!keep || last_of_chunk) reshard(i);
    // The trainer marks every backward as possibly the last: with no forward left open, all reductions finish.
    --forwards_[static_cast<std::size_t>(i)];
    if (std::all_of(forwards_.begin(), forwards_.end(), [](int f) { return f == 0; })) {
      for (std::size_t k = 0; k < grads_.size(); ++k) finish_reduce(static_cast<int>(k));
      last_reduced_ = -1;
    }
  }
  void finish_reduce(int i) {
    if (grads_[static_cast<std::size_t>(i)] != kReducing) return;
    grads_[static_cast<std::size_t>(i)] = kNone;
    --grads_in_use_;
  }

  const GptStageUnits& u_;
  int prefetch_;
  std::vector<bool> gathered_;
  std::vector<Grads> grads_;
  std::vector<int> forwards_;  // forwards whose backward has not ended
  std::uint64_t params_in_use_ = 0, grads_in_use_ = 0;
  int last_reduced_ = -1;
  PoolPeaks peaks_;
};

}  // namespace

PoolPeaks replay_pools(const std::vector<PipelineAction>& list, int pp, const GptStageUnits& units, int prefetch,
                       bool keep_gathered) {
  Replay r(units, prefetch);
  r.keep = keep_gathered;
  std::vector<std::size_t> last_backward(static_cast<std::size_t>(units.chunks()), 0);
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == PipelineActionKind::kBackward)
      last_backward[static_cast<std::size_t>(list[i].virtual_stage / pp)] = i;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const PipelineAction& a = list[i];
    const int chunk = a.virtual_stage / pp;
    if (a.kind == PipelineActionKind::kForward) r.forward(chunk);
    if (a.kind == PipelineActionKind::kBackward) {
      r.last_of_chunk = i == last_backward[static_cast<std::size_t>(chunk)];
      r.backward(chunk);
    }
  }
  r.finish_step();
  return r.peaks();
}

}  // namespace strata::gpt
