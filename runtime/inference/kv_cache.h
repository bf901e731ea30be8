// KvCache: the keys and values a decoder keeps for `sequences` sequences of up to `context` positions in each of
// `layers` layers, `width` floats a position for keys and as many for values, laid out [sequence, position, width]
// per layer. In device memory; or in host memory (page-locked beside a CUDA device, FlexGen's host placement), where
// a pass copies each layer's cached positions into one of a few device staging slots on an upload stream, ahead of
// its turn, and copies the positions the pass wrote back to host memory after it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"

namespace strata {

class KvCache {
 public:
  // Rows of one sequence in a pass: positions [0, pos) are read, [pos, pos + n) written.
  struct Span {
    int seq = 0, pos = 0, n = 0;
  };

  // The device staging slots of a host cache: min(prefetch_depth + 1, layers).
  static int staging_slots(int prefetch_depth, int layers);

  KvCache(Device& device, int layers, int sequences, int context, int width, bool on_host, int prefetch_depth = 1);
  // Waits for the copies in flight.
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // A pass over `spans` (distinct sequences) begins: a host cache issues the first slots' copies.
  void begin_pass(const std::vector<Span>& spans);
  // Layer `layer`'s keys and values for the pass, in device memory ([sequences, context, width] each): in a host cache,
  // a staging slot holding each span's positions [0, pos) once they have arrived (the compute stream waits for them).
  // Layers are acquired in order, each released before the next.
  struct Layer {
    float* keys;
    float* values;
  };
  Layer acquire(int layer);
  // The compute stream's work on `layer` is enqueued: a host cache copies the spans' new positions back and gives the
  // slot to the layer `staging_slots()` ahead.
  void release(int layer);

  bool on_host() const { return on_host_; }
  std::uint64_t device_bytes() const;  // the cache itself, or a host cache's staging slots
  std::uint64_t host_bytes() const;    // a host cache
  // Copied between host and device memory by the passes so far (a host cache): each span's read positions and its
  // written ones, in keys and values, every layer.
  std::uint64_t link_bytes() const { return link_; }

 private:
  void issue(int layer);              // the copies that fill `layer`'s slot
  std::size_t seq_floats() const { return static_cast<std::size_t>(ctx_) * static_cast<std::size_t>(width_); }
  std::size_t layer_floats() const { return static_cast<std::size_t>(seqs_) * seq_floats(); }

  Device& dev_;
  int layers_, seqs_, ctx_, width_;
  bool on_host_;
  std::unique_ptr<Device> host_;
  std::vector<Buffer> keys_, values_;                      // per layer, in device memory or (host cache) host memory
  std::vector<Buffer> slot_keys_, slot_values_;            // host cache: per staging slot
  std::vector<std::unique_ptr<Event>> loaded_, consumed_;  // per slot
  std::unique_ptr<Event> pass_done_;                       // the last pass's write-backs are enqueued before it
  std::unique_ptr<Stream> upload_;
  std::vector<Span> spans_;
  int next_ = 0;  // the next layer to acquire
  std::uint64_t link_ = 0;
};

}  // namespace strata
