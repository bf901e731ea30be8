// ActivationOffload: a block's saved activations in host memory between its forward and its backward. The forward
// writes them into one of two device staging sets, which the offload stream copies out to the block's host set; the
// backward reads them from a staging set the offload stream filled ahead of it (prefetch), so the copies overlap the
// neighbouring blocks' compute. On the CPU backend the host set is a ledger of its own, as optimizer offload's is.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"

namespace strata {

class ActivationOffload {
 public:
  // `sizes`: bytes of each activation one block saves; `blocks`: the host sets to hold (block ids [0, blocks)).
  ActivationOffload(Device& device, std::vector<std::size_t> sizes, int blocks);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // Forward: the staging set the next block writes into (the compute stream waits until its last use is done), then
  // the copy of that set to block `block`'s host set, queued on the offload stream after the compute so far.
  int begin_forward();
  void end_forward(int set, int block);
  // Backward: queues the copy of block `block` into a staging set unless one holds it already (its forward's, when
  // nothing has written over it since, or an earlier prefetch); begin_backward returns that set with the compute
  // stream ordered after the copy, end_backward frees it once the compute so far has read it.
  void prefetch(int block);
  int begin_backward(int block);
  void end_backward(int set);
  // Where activation `act` of staging set `set` lives on the device.
  void* staging(int set, int act) const {
    return staging_[static_cast<std::size_t>(set)][static_cast<std::size_t>(act)].data();
  }

  // Bytes of activation `act` (as the constructor was given them).
  std::size_t bytes(int act) const { return sizes_[static_cast<std::size_t>(act)]; }
  Device& host() const { return *host_; }
  // Bytes copied to and from host memory since construction.
  std::uint64_t bytes_out() const { return bytes_out_; }
  std::uint64_t bytes_in() const { return bytes_in_; }

 private:
  static constexpr int kSets = 2;
  int set_holding(int block) const;
  void copy_in(int set, int block);

  Device& dev_;
  std::vector<std::size_t> sizes_;
  std::uint64_t set_bytes_ = 0;  // the sum of sizes_: one block's activations
  std::unique_ptr<Device> host_;
  std::unique_ptr<Stream> stream_;
  std::vector<std::vector<Buffer>> host_sets_;                 // [block][act]
  std::array<std::vector<Buffer>, kSets> staging_;             // [set][act], device workspace
  std::array<int, kSets> holds_{-1, -1};                       // the block whose activations a set holds
  std::array<std::unique_ptr<Event>, kSets> free_, loaded_;    // last use of a set done; its copy-in done
  std::unique_ptr<Event> computed_;                            // the forward's compute, before its copy-out
  int next_ = 0;
  std::uint64_t bytes_out_ = 0, bytes_in_ = 0;
};

}  // namespace strata
