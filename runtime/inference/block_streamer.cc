// BlockStreamer: copy t (t = 0, 1, ...) brings block t % count into slot t % slots; consuming copy t issues copy
// t + slots into the slot it frees, after the compute stream's work on it, on upload stream t % streams. Under a shard
// group a copy is this rank's part followed by the group's all-gather, both on that upload stream.
#include "runtime/inference/block_streamer.h"

#include <algorithm>
#include <cstring>

#include "core/device_registry.h"
#include "core/error.h"

namespace strata {

int BlockStreamer::slot_count(int prefetch_depth, int count) { return stream_slots(prefetch_depth, count); }

BlockStreamer::BlockStreamer(Device& device, std::size_t block_bytes, int count, WeightSource source,
                             int prefetch_depth, Fill fill, MemCategory category, Communicator* shard)
    : dev_(device), block_bytes_(block_bytes), count_(count), source_(source), fill_(std::move(fill)), shard_(shard) {
  STRATA_CHECK(count >= 1 && prefetch_depth >= 0, "a stream of {} blocks with prefetch depth {}", count,
               prefetch_depth);
  if (shard_ && shard_->size() > 1) {
    shards_ = shard_->size();
    shard_rank_ = shard_->rank();
  } else {
    shard_ = nullptr;
  }
  STRATA_CHECK(source_ != WeightSource::kDevice || shard_,
               "weights streamed from device memory need a shard group of 2 or more ranks, each holding a part of "
               "every block (with one rank, keep the blocks resident)");
  part_ = shard_part(block_bytes_, shards_);
  slot_size_ = part_ * static_cast<std::size_t>(shards_);
  if (source_ == WeightSource::kHost || source_ == WeightSource::kDevice) {
    Device* home = &dev_;
    std::vector<std::uint8_t> stage;
    if (source_ == WeightSource::kHost) {
      host_ = create_host_device(dev_);
      home = host_.get();
    } else if (dev_.kind() != DeviceKind::kCpu) {
      stage.resize(part_);
    }
    for (int b = 0; b < count_; ++b) {
      parts_.push_back(home->allocate(part_, category));
      if (stage.empty()) {
        fill_part(b, parts_.back().data());
      } else {
        fill_part(b, stage.data());
        dev_.copy_from_host(parts_.back().data(), stage.data(), part_);
      }
    }
  }
  const int n = slot_count(prefetch_depth, count_);
  for (int i = 0; i < n; ++i) {
    slots_.push_back(dev_.allocate(slot_size_, category));
    if (source_ == WeightSource::kDisk && dev_.kind() != DeviceKind::kCpu) {
      if (!host_) host_ = create_host_device(dev_);
      staging_.push_back(host_->allocate(part_, category));
    }
    loaded_.push_back(dev_.create_event());
    consumed_.push_back(dev_.create_event());
  }
  // Two blocks read from disk at once hide one's cold-read latency behind the other's (the disk's own rate is the
  // same with one reader or two); copies from memory keep one stream, one copy engine.
  const int streams = source_ == WeightSource::kDisk ? std::min(n, 2) : 1;
  for (int i = 0; i < streams; ++i) uploads_.push_back(dev_.create_stream("weight-upload"));
  for (int i = 0; i < n; ++i) issue();
}

int BlockStreamer::host_copy_threads() const {
  return dev_.kind() == DeviceKind::kCpu || source_ == WeightSource::kDisk ? static_cast<int>(uploads_.size()) : 0;
}

BlockStreamer::~BlockStreamer() {
  try {
    for (auto& u : uploads_) u->synchronize();  // no copy may still write a slot being freed
  } catch (const std::exception&) {
    // A failed copy failed the pass that waited for it; nothing is left to report.
  }
}

void BlockStreamer::fill_part(int block, void* dst) {
  const std::size_t begin = std::min(block_bytes_, static_cast<std::size_t>(shard_rank_) * part_);
  const std::size_t bytes = std::min(part_, block_bytes_ - begin);
  if (bytes > 0) fill_(block, begin, bytes, dst);
  std::memset(static_cast<std::uint8_t*>(dst) + bytes, 0, part_ - bytes);
}

void BlockStreamer::issue() {
  const std::size_t s = issued_ % slots_.size();
  const int block = static_cast<int>(issued_ % static_cast<std::uint64_t>(count_));
  Stream& upload = *uploads_[issued_ % uploads_.size()];
  ++issued_;
  upload.wait(*consumed_[s]);
  std::uint8_t* slot = static_cast<std::uint8_t*>(slots_[s].data());
  std::uint8_t* mine = slot + static_cast<std::size_t>(shard_rank_) * part_;
  const void* gather_from = mine;  // in place, as NCCL allows
  if (source_ == WeightSource::kDevice) {
    gather_from = parts_[static_cast<std::size_t>(block)].data();
  } else if (source_ == WeightSource::kHost) {
    dev_.copy(mine, parts_[static_cast<std::size_t>(block)].data(), part_, upload);
  } else if (staging_.empty()) {  // the device's memory is the host's: fill the slot itself
    upload.enqueue_host([this, block, mine] { fill_part(block, mine); });
  } else {
    void* stage = staging_[s].data();
    upload.enqueue_host([this, block, stage] { fill_part(block, stage); });
    dev_.copy(mine, stage, part_, upload);
  }
  if (shard_) shard_->all_gather(gather_from, slot, part_ / 4, DType::kF32, upload);
  upload.record(*loaded_[s]);
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
  held_ = false;
  dev_.compute_stream().record(*consumed_[s]);
  issue();
}

}  // namespace strata
