// KvCache: a host cache's layer l fills slot l % slots; its write-back and the slot's hand-over to layer l + slots
// follow the compute stream's work on it, and the next pass's first copies wait for this pass's last write-back.
#include "runtime/inference/kv_cache.h"

#include <algorithm>

#include "core/device_registry.h"
#include "core/error.h"
#include "runtime/memory/inference_planner.h"

namespace strata {

int KvCache::staging_slots(int prefetch_depth, int layers) { return stream_slots(prefetch_depth, layers); }

KvCache::KvCache(Device& device, int layers, int sequences, int context, int width, bool on_host, int prefetch_depth)
    : dev_(device), layers_(layers), seqs_(sequences), ctx_(context), width_(width), on_host_(on_host) {
  STRATA_CHECK(layers >= 1 && sequences >= 1 && context >= 1 && width >= 1 && prefetch_depth >= 0,
               "a KV cache of {} layers, {} sequences, {} positions, width {}, prefetch depth {}", layers, sequences,
               context, width, prefetch_depth);
  const std::size_t bytes = layer_floats() * 4;
  Device& home = on_host_ ? *(host_ = create_host_device(dev_)) : dev_;
  for (int l = 0; l < layers_; ++l) {
    keys_.push_back(home.allocate(bytes, MemCategory::kActivations));
    values_.push_back(home.allocate(bytes, MemCategory::kActivations));
  }
  if (!on_host_) return;
  for (int s = 0; s < staging_slots(prefetch_depth, layers_); ++s) {
    slot_keys_.push_back(dev_.allocate(bytes, MemCategory::kActivations));
    slot_values_.push_back(dev_.allocate(bytes, MemCategory::kActivations));
    loaded_.push_back(dev_.create_event());
    consumed_.push_back(dev_.create_event());
  }
  pass_done_ = dev_.create_event();
  upload_ = dev_.create_stream("kv-upload");
}

KvCache::~KvCache() {
  if (!upload_) return;
  try {
    upload_->synchronize();
    dev_.compute_stream().synchronize();  // the write-backs read the slots being freed
  } catch (const std::exception&) {
    // A failed copy failed the pass that waited for it; nothing is left to report.
  }
}

void KvCache::begin_pass(const std::vector<Span>& spans) {
  STRATA_CHECK_CODE(ErrorCode::kInternal, next_ == 0, "a KV cache pass begins at layer {} of the last", next_);
  for (const Span& s : spans)
    STRATA_CHECK(s.seq >= 0 && s.seq < seqs_ && s.pos >= 0 && s.n >= 0 && s.pos + s.n <= ctx_,
                 "KV cache span: sequence {} positions [{}, {}) outside {} sequences of {} positions", s.seq, s.pos,
                 s.pos + s.n, seqs_, ctx_);
  spans_ = spans;
  if (!on_host_) return;
  dev_.compute_stream().record(*pass_done_);
  upload_->wait(*pass_done_);
  for (int l = 0; l < static_cast<int>(slot_keys_.size()); ++l) issue(l);
}

KvCache::Layer KvCache::acquire(int layer) {
  STRATA_CHECK_CODE(ErrorCode::kInternal, layer == next_, "KV cache layer {} acquired, layer {} expected", layer,
                    next_);
  if (!on_host_) {
    const std::size_t l = static_cast<std::size_t>(layer);
    return Layer{keys_[l].as<float>(), values_[l].as<float>()};
  }
  const std::size_t s = static_cast<std::size_t>(layer) % slot_keys_.size();
  dev_.compute_stream().wait(*loaded_[s]);
  return Layer{slot_keys_[s].as<float>(), slot_values_[s].as<float>()};
}

void KvCache::issue(int layer) {
  const std::size_t s = static_cast<std::size_t>(layer) % slot_keys_.size();
  upload_->wait(*consumed_[s]);
  const std::size_t l = static_cast<std::size_t>(layer), w = static_cast<std::size_t>(width_);
  for (const Span& sp : spans_) {
    if (sp.pos == 0) continue;
    const std::size_t at = static_cast<std::size_t>(sp.seq) * seq_floats(),
                      bytes = static_cast<std::size_t>(sp.pos) * w * 4;
    dev_.copy(slot_keys_[s].as<float>() + at, keys_[l].as<float>() + at, bytes, *upload_);
    dev_.copy(slot_values_[s].as<float>() + at, values_[l].as<float>() + at, bytes, *upload_);
    link_ += 2 * bytes;
  }
  upload_->record(*loaded_[s]);
}

void KvCache::release(int layer) {
  STRATA_CHECK_CODE(ErrorCode::kInternal, layer == next_, "KV cache layer {} released, layer {} expected", layer,
                    next_);
  next_ = layer + 1 == layers_ ? 0 : layer + 1;
  if (!on_host_) return;
  const std::size_t s = static_cast<std::size_t>(layer) % slot_keys_.size();
  const std::size_t l = static_cast<std::size_t>(layer), w = static_cast<std::size_t>(width_);
  Stream& compute = dev_.compute_stream();
  for (const Span& sp : spans_) {
    if (sp.n == 0) continue;
    const std::size_t at = static_cast<std::size_t>(sp.seq) * seq_floats() + static_cast<std::size_t>(sp.pos) * w;
    const std::size_t bytes = static_cast<std::size_t>(sp.n) * w * 4;
    dev_.copy(keys_[l].as<float>() + at, slot_keys_[s].as<float>() + at, bytes, compute);
    dev_.copy(values_[l].as<float>() + at, slot_values_[s].as<float>() + at, bytes, compute);
    link_ += 2 * bytes;
  }
  compute.record(*consumed_[s]);
  if (layer + static_cast<int>(slot_keys_.size()) < layers_) issue(layer + static_cast<int>(slot_keys_.size()));
}

std::uint64_t KvCache::device_bytes() const {
  const std::uint64_t layer = 2ull * layer_floats() * 4;
  return on_host_ ? slot_keys_.size() * layer : static_cast<std::uint64_t>(layers_) * layer;
}

std::uint64_t KvCache::host_bytes() const {
  return on_host_ ? 2ull * static_cast<std::uint64_t>(layers_) * layer_floats() * 4 : 0;
}

}  // namespace strata
