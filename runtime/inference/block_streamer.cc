// BlockStreamer: copy t (t = 0, 1, ...) brings block t % count into slot t % slots; consuming copy t issues copy
// t + slots into the slot it frees, after the compute stream's work on it.
#include "runtime/inference/block_streamer.h"

#include <algorithm>

#include "core/device_registry.h"
#include "core/error.h"

namespace strata {

int BlockStreamer::slot_count(int prefetch_depth, int count) { return std::min(prefetch_depth + 1, count); }

BlockStreamer::BlockStreamer(Device& device, std::size_t block_bytes, int count, WeightSource source,
                             int prefetch_depth, Fill fill, MemCategory category)
    : dev_(device), block_bytes_(block_bytes), count_(count), source_(source), fill_(std::move(fill)) {
  STRATA_CHECK(count >= 1 && prefetch_depth >= 0, "a stream of {} blocks with prefetch depth {}", count,
               prefetch_depth);
  if (source_ == WeightSource::kHost) {
    host_ = create_host_device(dev_);
    for (int b = 0; b < count_; ++b) {
      host_blocks_.push_back(host_->allocate(block_bytes_, category));
      fill_(b, host_blocks_.back().data());
    }
  }
  const int n = slot_count(prefetch_depth, count_);
  for (int i = 0; i < n; ++i) {
    slots_.push_back(dev_.allocate(block_bytes_, category));
    if (source_ == WeightSource::kDisk && dev_.kind() != DeviceKind::kCpu) {
      if (!host_) host_ = create_host_device(dev_);
      staging_.push_back(host_->allocate(block_bytes_, category));
    }
    loaded_.push_back(dev_.create_event());
    consumed_.push_back(dev_.create_event());
  }
  upload_ = dev_.create_stream("weight-upload");
  for (int i = 0; i < n; ++i) issue();
}

BlockStreamer::~BlockStreamer() {
  try {
    upload_->synchronize();  // no copy may still write a slot being freed
  } catch (const std::exception&) {
    // A failed copy failed the pass that waited for it; nothing is left to report.
  }
}

void BlockStreamer::issue() {
  const std::size_t s = issued_ % slots_.size();
  const int block = static_cast<int>(issued_ % static_cast<std::uint64_t>(count_));
  ++issued_;
  upload_->wait(*consumed_[s]);
  void* slot = slots_[s].data();
  if (source_ == WeightSource::kHost) {
    dev_.copy(slot, host_blocks_[static_cast<std::size_t>(block)].data(), block_bytes_, *upload_);
  } else if (staging_.empty()) {  // the device's memory is the host's: fill the slot itself
    upload_->enqueue_host([this, block, slot] { fill_(block, slot); });
  } else {
    void* stage = staging_[s].data();
    upload_->enqueue_host([this, block, stage] { fill_(block, stage); });
    dev_.copy(slot, stage, block_bytes_, *upload_);
  }
  upload_->record(*loaded_[s]);
}

const void* BlockStreamer::acquire(int block) {
  const std::size_t s = consumed_count_ % slots_.size();
  STRATA_CHECK_CODE(ErrorCode::kInternal,
                    !held_ && block == static_cast<int>(consumed_count_ % static_cast<std::uint64_t>(count_)),
                    "stream slot {} holds block {}, not block {}{}", s,
                    consumed_count_ % static_cast<std::uint64_t>(count_), block,
                    held_ ? " (the block acquired before is not released)" : "");
  dev_.compute_stream().wait(*loaded_[s]);
  held_ = true;
  return slots_[s].data();
}

void BlockStreamer::release() {
  STRATA_CHECK_CODE(ErrorCode::kInternal, held_, "release without an acquired block");
  const std::size_t s = consumed_count_ % slots_.size();
  ++consumed_count_;
  streamed_ += block_bytes_;
  held_ = false;
  dev_.compute_stream().record(*consumed_[s]);
  issue();
}

}  // namespace strata
