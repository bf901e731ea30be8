// GptDecoder: the model of gpt_model.h, either family, run forward only with a KV cache, for a batch of sequences of
// different lengths: a prompt goes through in chunks (prefill), then one token per sequence and step (decode), the
// rows of every sequence in one pass through each layer's products, so a step reads each weight once for the whole
// batch. Attention is the block kernel of runtime/context/attention_kernels.h: each sequence's new queries against its
// cached keys and values. A Llama-style model's q and k are rotated at each row's own position before its keys join
// the cache (the cache holds rotated keys, as Hugging Face's does), and the cache holds its key-value heads only
// (kv_width a layer and position, grouped-query attention). Weights are f32 (this rank's slices under tensor
// parallelism): the embeddings, final norm and head always in device memory, each block either resident there or
// streamed into one of a few slots before its turn in every pass (DecodePlacement), so a model larger than the device
// budget still runs. The device's kernel table: the CPU's, or on a CUDA device the CUDA table's (its attention block
// is f32 only, so `matmul` kBF16 is refused there).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "models/gpt/model/gpt_model.h"
#include "runtime/inference/decoder.h"
#include "runtime/memory/inference_planner.h"

namespace strata::gpt {

// Reads elements [begin, begin + count) of the named parameter (its whole row-major shape, gpt_units' names) as f32
// into host memory at `out`. Blocks streamed from disk are read two at a time: it must be safe to call from two
// threads at once.
using WeightReader = std::function<void(const std::string& name, std::size_t begin, std::size_t count, float* out)>;

// Where the blocks' weights live, as strata-plan --inference's placements: the first `resident_layers` blocks in device
// memory, the others streamed, in layer order, into prefetch_depth + 1 slots (fewer when fewer blocks stream) on an
// upload stream, each block copied in while the blocks before it compute (runtime/inference/block_streamer.h). kHost:
// the streamed blocks are read once into host memory (page-locked beside a CUDA device) and copied from there every
// pass; kDisk: they are read through the WeightReader every pass (a checkpoint's chunk files, CRC-checked, or a
// safetensors file); kDevice (with a shard group only): this rank's part of each is kept in device memory and the
// group gathers the rest.
struct DecodePlacement {
  int resident_layers = -1;        // -1: every block, or as many as fit device_memory when it is set
  std::uint64_t device_memory = 0;  // bytes the decoder may hold in device memory (0: no limit)
  WeightSource source = WeightSource::kHost;
  int prefetch_depth = 1;  // blocks copied ahead of the one computing (0: each copied just before its turn)
  // The KV cache in host memory (FlexGen's host placement, runtime/inference/kv_cache.h): each layer's cached
  // positions are copied into one of prefetch_depth + 1 device staging slots ahead of its turn, and the positions a
  // pass writes are copied back after it.
  bool kv_on_host = false;
  // kInvalidArgument for a depth outside [0, 8] or resident_layers below -1.
  void validate() const;
};

class GptDecoder : public Decoder {
 public:
  // Up to `sequences` sequences at once, each up to cfg.ctx positions; a pass takes at most `max_rows` tokens in all
  // (a longer prompt is cut into chunks of that many). `matmul` as GptPrecision's (kF32 or kBF16 products). A
  // placement whose device memory passes its budget is refused with kOutOfMemory naming what the least would need.
  // `tp`: a tensor-parallel group (Megatron's split, as training's: this rank's heads, channels of the MLP and rows of
  // the vocabulary, two all-reduces a block, the logits gathered whole on every rank); its ranks construct together
  // and make the same calls. Null: tp 1. A Llama-style model splits as its training does (GptConfig::validate_tp: each
  // rank holds whole key-value heads, its share of q | k | v's unequal parts).
  // `shard`: ranks that decode sequences of their own but share the streamed blocks (ZeRO-Inference's multi-device
  // fetch): each holds or reads 1/N of every streamed block (from host memory, disk, or device memory with kDevice)
  // and the group all-gathers the block into each one's slot before its turn. Its ranks construct together and take
  // every pass together (generate() keeps them in step: lockstep_group()). Under tp, the ranks of one shard group
  // hold the same tp slices (the same tp rank in different tp groups). Null or a group of one: whole blocks.
  GptDecoder(const GptConfig& cfg, Device& device, int sequences, const WeightReader& read, int max_rows = kPrefillRows,
             DType matmul = DType::kF32, const DecodePlacement& placement = {}, Communicator* tp = nullptr,
             Communicator* shard = nullptr);
  ~GptDecoder() override;

  const GptConfig& config() const;
  int vocab() const override { return config().vocab; }
  int context() const override { return config().ctx; }
  int sequences() const override;
  int length(int seq) const override;  // positions cached for sequence `seq`
  void reset(int seq) override;        // forgets its positions (a new sequence may take the slot)

  // The next `n` tokens of sequence `seq` (host memory), in chunks of max_rows: their keys and values join the
  // cache. Returns the logits of the last one (cfg.vocab floats, host memory, valid until the next call); with
  // `all_logits`, the n rows of logits go there too (n x vocab). kInvalidArgument, naming the sequence, when the
  // positions would pass cfg.ctx or a token is outside the vocabulary.
  const float* prefill(int seq, const std::int32_t* tokens, int n, float* all_logits = nullptr) override;
  // One token for each sequence in `seqs` (distinct, at most max_rows), at each one's next position, in one pass.
  // Returns the logits, one row of cfg.vocab per sequence in the order given (host memory, valid until the next call).
  const float* decode(const std::vector<int>& seqs, const std::vector<std::int32_t>& tokens) override;

  // What the passes so far read from device memory: every weight once a pass, and the keys and values each
  // sequence's queries attended to (a decode step of sequences at lengths L_i reads sum (L_i + 1) x 2 x layers x
  // kv_width floats of cache, this rank's part of kv_width under tp; kv_width is embd for GPT-2).
  std::uint64_t weight_bytes_read() const override;
  std::uint64_t cache_bytes_read() const override;
  // What the passes so far copied into the stream slots from host memory or disk: each streamed block once a pass (this
  // rank's part of it under a shard group, none with kDevice); and what they received from the shard group's other
  // ranks (their parts).
  std::uint64_t streamed_bytes_read() const override;
  std::uint64_t gathered_bytes_read() const override;
  // The shard group when blocks stream through it (else null); a pass over no rows; prefill's chunks.
  Communicator* lockstep_group() override;
  void idle_pass() override;
  int prefill_passes(int n) const override;
  // The streamed blocks' upload streams on the CPU backend (a disk reader's beside a GPU). A host KV cache's copies
  // are not counted: a few per cent of a step's bytes (bench_decode's host-kv row), not worth a core.
  int copy_threads() const override;
  std::uint64_t weight_shard_bytes() const;  // kDevice: this rank's parts of the streamed blocks, in device memory
  std::uint64_t weight_bytes() const;  // of one pass: the parameters, f32
  // The KV cache's size in device memory (0 when it is in host memory): sequences x ctx x 2 x layers x kv_width floats.
  std::uint64_t cache_bytes() const;
  std::uint64_t cache_staging_bytes() const;  // a host cache's staging slots in device memory
  std::uint64_t cache_host_bytes() const;     // a host cache's size
  // Keys and values the passes so far copied between a host cache and the device: each sequence's cached positions
  // in, the ones a pass wrote out.
  std::uint64_t cache_link_bytes() const override;
  int resident_layers() const;         // blocks resident in device memory; the rest stream
  std::uint64_t resident_weight_bytes() const;  // in device memory: embeddings, final norm, head, resident blocks
  std::uint64_t stream_slot_bytes() const;      // the slots streamed blocks are copied into
  std::uint64_t device_bytes() const;           // everything the decoder holds in device memory

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::gpt
