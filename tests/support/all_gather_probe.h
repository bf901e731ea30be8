// AllGatherProbe: what the hang and departure probes share: a "comm" stream and the buffers of a 1024-float
// all_gather over the world, opened by one barrier that every rank meets.
#pragma once

#include <memory>

#include "collectives/communicator.h"
#include "runtime/bootstrap/runtime.h"

namespace strata::test {

class AllGatherProbe {
 public:
  static constexpr std::size_t kCount = 1024;

  // Collective: every rank opens the stream and meets once (the world's seq 0).
  explicit AllGatherProbe(Runtime& rt)
      : rt_(rt),
        stream_(rt.device().create_stream("comm")),
        send_(rt.device().allocate(kCount * 4, MemCategory::kCommBuffer)),
        recv_(rt.device().allocate(rt.world_size() * kCount * 4, MemCategory::kCommBuffer)) {
    rt_.world().barrier(*stream_);
    stream_->synchronize();
  }

  void all_gather() { rt_.world().all_gather(send_.data(), recv_.data(), kCount, DType::kF32, *stream_); }
  // A recv of kCount floats from `peer` into the gather buffer.
  void recv_from(int peer) { rt_.world().recv(recv_.data(), kCount, DType::kF32, peer, *stream_); }
  void synchronize() { stream_->synchronize(); }

 private:
  Runtime& rt_;
  std::unique_ptr<Stream> stream_;
  Buffer send_;
  Buffer recv_;
};

}  // namespace strata::test
