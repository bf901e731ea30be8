// ActivationOffload: two device staging sets, the host sets, and the events that order them.
#include "runtime/memory/activation_offload.h"

#include "core/device_registry.h"
#include "core/error.h"

namespace strata {

ActivationOffload::ActivationOffload(Device& device, std::vector<std::size_t> sizes, int blocks)
    : dev_(device), sizes_(std::move(sizes)), host_(create_host_device(device)),
      stream_(device.create_stream("activation offload")), computed_(device.create_event()) {
  STRATA_CHECK(blocks >= 1 && !sizes_.empty(), "activation offload of {} blocks of {} activations", blocks,
               sizes_.size());
  for (std::size_t bytes : sizes_) set_bytes_ += bytes;
  host_sets_.resize(static_cast<std::size_t>(blocks));
  for (std::vector<Buffer>& set : host_sets_)
    for (std::size_t bytes : sizes_) set.push_back(host_->allocate(bytes, MemCategory::kActivations));
  for (int s = 0; s < kSets; ++s) {
    for (std::size_t bytes : sizes_)
      staging_[static_cast<std::size_t>(s)].push_back(dev_.allocate(bytes, MemCategory::kWorkspace));
    free_[static_cast<std::size_t>(s)] = dev_.create_event();
    loaded_[static_cast<std::size_t>(s)] = dev_.create_event();
  }
}

ActivationOffload::~ActivationOffload() {
  // The copies read and write the buffers freed below.
  try {
    stream_->synchronize();
  } catch (...) {
  }
}

int ActivationOffload::begin_forward() {
  const int s = next_;
  next_ = (next_ + 1) % kSets;
  dev_.compute_stream().wait(*free_[static_cast<std::size_t>(s)]);
  holds_[static_cast<std::size_t>(s)] = -1;
  return s;
}

void ActivationOffload::end_forward(int set, int block) {
  STRATA_CHECK(block >= 0 && block < static_cast<int>(host_sets_.size()), "offloaded block {} is outside [0, {})",
               block, host_sets_.size());
  const auto s = static_cast<std::size_t>(set);
  dev_.compute_stream().record(*computed_);
  stream_->wait(*computed_);
  std::vector<Buffer>& host = host_sets_[static_cast<std::size_t>(block)];
  for (std::size_t a = 0; a < sizes_.size(); ++a) dev_.copy(host[a].data(), staging_[s][a].data(), sizes_[a], *stream_);
  bytes_out_ += set_bytes_;
  stream_->record(*free_[s]);
  // This forward's activations replace the block's earlier ones: a set still holding those is stale.
  for (int& held : holds_)
    if (held == block) held = -1;
  holds_[s] = block;  // still valid on the device until a later use writes over it
}

int ActivationOffload::set_holding(int block) const {
  for (int s = 0; s < kSets; ++s)
    if (holds_[static_cast<std::size_t>(s)] == block) return s;
  return -1;
}

void ActivationOffload::copy_in(int set, int block) {
  const auto s = static_cast<std::size_t>(set);
  stream_->wait(*free_[s]);
  const std::vector<Buffer>& host = host_sets_[static_cast<std::size_t>(block)];
  for (std::size_t a = 0; a < sizes_.size(); ++a) dev_.copy(staging_[s][a].data(), host[a].data(), sizes_[a], *stream_);
  bytes_in_ += set_bytes_;
  stream_->record(*loaded_[s]);
  holds_[s] = block;
}

void ActivationOffload::prefetch(int block) {
  if (set_holding(block) >= 0) return;
  const int s = next_;
  next_ = (next_ + 1) % kSets;
  copy_in(s, block);
}

int ActivationOffload::begin_backward(int block) {
  prefetch(block);
  const int s = set_holding(block);
  dev_.compute_stream().wait(*loaded_[static_cast<std::size_t>(s)]);
  // The next prefetch goes to the other set: this one is in use until end_backward.
  next_ = (s + 1) % kSets;
  return s;
}

void ActivationOffload::end_backward(int set) { dev_.compute_stream().record(*free_[static_cast<std::size_t>(set)]); }

}  // namespace strata
