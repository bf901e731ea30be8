// InferencePlanner: device memory by category and decode tokens/s for a GPT-style decoder whose weights are resident
// in device memory or streamed per layer from host memory or disk, and the placement (resident layers, where the KV
// cache lives, batch) that maximises tokens/s under a device budget, as FlexGen's policy search does. Decode is
// bound by bytes, not FLOPs: every step reads every weight once for the whole batch and each sequence's KV cache.
// The arithmetic is in docs/inference.md.
#pragma once

#include <cstddef>
#include <string>

#include "core/dtype.h"
#include "runtime/memory/memory_planner.h"

namespace strata {

// Where the layers that are not resident stream from. kDevice: device memory itself, which holds only this device's
// 1/shard of each of them (ZeRO-3's sharded parameters, gathered layer by layer); it needs shard > 1.
enum class WeightSource { kHost, kDisk, kDevice };
const char* weight_source_name(WeightSource s);  // "host", "disk", "device"

struct InferenceHardware {
  double device_memory = 80e9;  // bytes per device
  double host_memory = 512e9;   // host memory per device for streamed layers and a host KV cache
  double device_gbs = 3350;     // device memory bandwidth, GB/s
  double host_gbs = 25;         // host -> device copy rate (pinned memory over PCIe), GB/s per device
  double disk_gbs = 3;          // disk read rate with the page cache cold, GB/s per device
  double peer_gbs = 150;        // all-gather bus bandwidth between the devices a layer is sharded over, GB/s
  double peak_tflops = 989;     // dense 16-bit, per device
  double efficiency = 0.6;      // fraction of peak the matrix products reach
};

struct InferenceInput {
  ModelShape model;  // layers, hidden, heads, vocab; seq is the context the KV cache holds (prompt + generated)
  int kv_heads = 0;  // key / value heads (grouped-query attention); 0: model.kv_heads (itself 0: as many as heads)
  int prompt = 0;    // tokens of each prompt, prefilled kPrefillRows at a time; the rest of seq is generated
  int tp = 1;        // tensor parallelism: heads and matrices split over tp devices, vocabulary-parallel head
  DType weight_dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  int batch = 0;             // sequences decoded together; 0: the batch that maximises tokens/s
  int resident_layers = -1;  // layers kept in device memory; -1: as many as fit
  int kv_on_device = -1;     // 1: the KV cache in device memory, 0: in host memory, -1: whichever is faster
  WeightSource source = WeightSource::kHost;
  int prefetch_depth = 1;  // layers streamed ahead of the one computing
  // Devices the streamed layers are sharded over (ZeRO-Inference's multi-device fetch): each holds or fetches
  // shard_part() of every streamed layer and the group all-gathers the layer into each one's slot; every device
  // decodes its own batch. 1: each device streams whole layers.
  int shard = 1;
  InferenceHardware hardware;
  // kInvalidArgument naming strata-plan's flags: sizes < 1, heads not dividing hidden, kv_heads not dividing heads,
  // tp not dividing heads, prompt outside [1, seq), a resident count outside [-1, layers], a rate <= 0, shard < 1,
  // a kDevice source without shard > 1.
  void validate() const;
};

// One device's part of a streamed block of `block_bytes` sharded over `shard` devices: ceil(block_bytes / shard),
// rounded up to 4 bytes (the group gathers f32 words); block_bytes itself when shard is 1. A block's slot holds
// shard parts.
std::size_t shard_part(std::size_t block_bytes, int shard);

// The slots a stream of `count` layers copied `prefetch_depth` ahead holds: the one in use and those on their way,
// min(prefetch_depth + 1, count), none for none. BlockStreamer's weight slots and a host KV cache's staging alike.
inline int stream_slots(int prefetch_depth, int count) {
  return count <= 0 ? 0 : (prefetch_depth + 1 < count ? prefetch_depth + 1 : count);
}

inline constexpr int kMaxInferenceBatch = 4096;

// The rows of a decoder's widest pass for `batch` sequences: a prompt is prefilled kPrefillRows tokens at a time, and
// a decode step takes one row a sequence. strata-generate builds its decoder for these; its workspace is sized by them.
inline constexpr int kPrefillRows = 128;
inline int decode_pass_rows(int batch) { return batch > kPrefillRows ? batch : kPrefillRows; }

// One device's widths of a decode pass's rows, in floats (the decoder computes in f32): the residual stream, q | k |
// v, the attention's output, the MLP's up product (gate | up when gated) and its activation, this device's query
// heads and vocabulary rows, and the tp degree (under tp the group's logits are gathered whole).
struct DecodeRowWidths {
  double hidden = 0, qkv = 0, att = 0, up = 0, act = 0, heads = 0, vocab_rows = 0;
  int tp = 1;
  // From a shape: what GptDecoder's tp slices hold (q and the MLP split over tp, k and v the rank's kv heads).
  static DecodeRowWidths of(const ModelShape& m, int tp);
  // Floats of one row of a pass's workspace: its token, a norm's mean and rstd, five rows of the residual's width (x,
  // the block's middle, a norm's output, a product's result, the head's input), q | k | v, the attention's output and
  // a log-sum-exp a head, the MLP's up product and activation, the logits and, under tp, the group's.
  double floats_per_row() const;
};

// A decoder's device memory on one device by what it holds, its placement left open. The planner fills it from a
// ModelShape (decode_memory below), GptDecoder from its own units; both place the blocks through it, so the budget
// decides the placement by one rule.
struct DecodeMemory {
  int layers = 0;
  double outside = 0;    // weights resident whatever the placement: embeddings, the final norm, an untied head
  double tables = 0;     // a rotary model's cos and sin of every position (f32), resident too
  double block = 0;      // one block's weights on this device
  double kv_layer = 0;   // one layer's keys and values for every sequence's whole context
  double workspace = 0;  // the widest pass's rows (decode_pass_rows) x DecodeRowWidths::floats_per_row, f32
  WeightSource source = WeightSource::kHost;
  int prefetch_depth = 1;
  int shard = 1;  // devices a streamed block is sharded over

  double part() const;                     // this device's part of a streamed block: shard_part, the block at 1
  double slot() const;                     // a stream slot: a whole block (shard x part under a shard group)
  int slots(int resident) const;           // stream slots for the layers past `resident` (stream_slots)
  double slot_bytes(int resident) const;   // those slots
  double shard_bytes(int resident) const;  // kDevice: this device's part of each streamed block
  int kv_layers(bool kv_on_host) const;    // layers of the cache on the device: all, or a host cache's staging
  double kv_bytes(bool kv_on_host) const;  // kv_layers x kv_layer
  double total(int resident, bool kv_on_host) const;
  // The most blocks resident, from `layers` down, whose total is within `budget` bytes; 0 when none is.
  int most_resident(double budget, bool kv_on_host) const;
};
// The planner's DecodeMemory for `in`'s model at `batch` sequences, in.weight_dtype and in.kv_dtype wide.
DecodeMemory decode_memory(const InferenceInput& in, int batch);

struct InferencePlan {
  int batch = 0;
  int resident_layers = 0, streamed_layers = 0;
  bool kv_on_device = true;
  // Device memory per device, bytes.
  double resident_weights = 0;  // embeddings, final norm and the resident layers
  double stream_buffers = 0;    // prefetch_depth + 1 layers' slots (at most one per streamed layer)
  double weight_shards = 0;     // kDevice: this device's part of every streamed layer
  double kv_cache = 0;          // batch x seq tokens of keys and values (device placement)
  double kv_staging = 0;        // host placement: min(prefetch_depth + 1, layers) layers' keys and values
  double workspace = 0;         // the widest pass's activations and logits, and a rotary table
  double total = 0;
  bool fits = false;
  double host_bytes = 0;          // in host memory (streamed layers, a host KV cache): fits needs it within bounds
  double kv_bytes_per_token = 0;  // one sequence, one position, every layer, on this device
  // One decode step (a token for each of `batch` sequences) at the generation's mean context length.
  double device_bytes = 0;  // read from device memory: every weight once, every sequence's keys and values
  double link_bytes = 0;    // host -> device: the streamed layers, a host KV cache
  double disk_bytes = 0;    // the streamed layers, when they come from disk
  double gather_bytes = 0;  // received from the other devices of a shard group: their parts of the streamed layers
  double flops = 0;
  double device_s = 0, link_s = 0, disk_s = 0, gather_s = 0, compute_s = 0;
  double step_s = 0;           // the slowest of the five: prefetch overlaps them
  std::string bound;           // "device memory bandwidth", "host link", "disk", "interconnect" or "compute"
  double tokens_per_s = 0;     // decode: batch / step_s
  double bytes_per_token = 0;  // (device_bytes + link_bytes + gather_bytes) / batch
  double prefill_tokens_per_s = 0;
  std::string json() const;
};

// The plan of one placement (batch, resident layers and KV placement taken from `in`, which must give all three).
InferencePlan plan_inference_at(const InferenceInput& in, int batch, int resident_layers, bool kv_on_device);
// The placement at `batch` that fits and decodes fastest (in.resident_layers and in.kv_on_device, when given, fix
// theirs); a plan with fits false when nothing fits, not even every layer streamed.
InferencePlan plan_inference(const InferenceInput& in, int batch);
// in.batch when given, else the batch from 1 to kMaxInferenceBatch (powers of two) whose plan fits with the most
// tokens/s (the smaller on a tie).
InferencePlan best_inference_plan(const InferenceInput& in);

// strata-plan --inference's report: the model, the hardware, and batch 1 beside the plan of best_inference_plan.
std::string inference_report(const InferenceInput& in, const InferencePlan& single, const InferencePlan& best);

}  // namespace strata
