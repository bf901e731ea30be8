// GptDecoder: a pass over rows of several sequences, each layer's products on all of them at once, attention per
// sequence against its cache.
#include "models/gpt/inference/gpt_decoder.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "collectives/rank_values.h"
#include "core/byte_units.h"
#include "core/error.h"
#include "models/gpt/model/kernel_table.h"
#include "runtime/inference/block_streamer.h"
#include "runtime/inference/kv_cache.h"
#include "runtime/parallel/tp_split.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/tensor/tensor_parallel.h"
#include "runtime/tensor/vocab_parallel.h"

namespace strata::gpt {
namespace {

// A block's parameters, in gpt_units' slot order.
enum BlockParam { kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kCount };

// Consecutive rows of one sequence in a pass: rows [row, row + n) at positions [pos, pos + n).
struct Group {
  int seq = 0, row = 0, n = 0, pos = 0;
};

}  // namespace

void DecodePlacement::validate() const {
  STRATA_CHECK(prefetch_depth >= 0 && prefetch_depth <= 8, "--prefetch {} must be in [0, 8]", prefetch_depth);
  STRATA_CHECK(resident_layers >= -1, "--resident-layers {} must be -1 (as many as fit) or more", resident_layers);
}

struct GptDecoder::Impl {
  GptConfig cfg;
  Device& dev;
  std::unique_ptr<GptKernels> k;
  int S, R;  // sequences, rows a pass
  std::vector<int> lengths;
  const WeightReader read;
  // Tensor parallelism over `group` (Megatron's split, as training's): this rank's heads of each block, a row-parallel
  // product's partial sums reduced before its bias, the vocabulary's rows [shard.begin, + shard.valid) of the table,
  // the logits gathered whole. T = 1: no group.
  Communicator* group;
  // The ranks the streamed blocks are sharded over (BlockStreamer's shard group), each decoding its own sequences in
  // step with the others; null: whole blocks.
  Communicator* shard_group;
  int T = 1, trank = 0, Cl = 0, NHl = 0;  // tp degree and rank; this rank's channels and heads of attention
  VocabShard shard;
  std::unique_ptr<TensorParallel> tp;
  std::vector<UnitSpec> units;  // gpt_units(cfg, T): this rank's slices
  // A block's parameters packed in one buffer, in gpt_units' slot order: floats [offset[i], offset[i] + size[i]).
  std::array<std::size_t, kCount> offset{}, size{};
  std::size_t block_floats = 0;
  Buffer wte, wpe, lnf_w, lnf_b;
  std::vector<Buffer> resident;  // the first `resident.size()` blocks
  // Blocks resident.size() .. layers - 1 stream through `stream` (block j of it is layer resident.size() + j).
  std::unique_ptr<BlockStreamer> stream;
  std::uint64_t held = 0;  // device memory the decoder holds: the budget's `need` of its placement
  std::unique_ptr<KvCache> kv;  // per layer: keys and values [S, ctx, Cl], in device or host memory
  // Workspace of one pass (R rows); `gathered` the tp group's logits.
  Buffer tokens, x, x2, ln, mean, rstd, qkv, atty, lse, tmp, fch, fchg, last, logits, gathered;
  std::vector<float> host_logits, gathered_host;
  std::uint64_t weight_read = 0, cache_read = 0, param_bytes = 0;

  Impl(const GptConfig& c, Device& d, int sequences, const WeightReader& reader, int max_rows, DType matmul,
       const DecodePlacement& where, Communicator* tp_group, Communicator* weight_group)
      : cfg(c), dev(d), S(sequences), R(max_rows), read(reader), group(tp_group),
        shard_group(weight_group && weight_group->size() > 1 ? weight_group : nullptr) {
    cfg.validate();
    where.validate();
    if (group) {
      T = group->size();
      trank = group->rank();
    }
    cfg.validate_tp(T, false, cfg.ctx);
    Cl = cfg.embd / T;
    NHl = cfg.heads / T;
    shard = VocabShard::of(cfg.vocab, T, trank);
    tp = std::make_unique<TensorParallel>(dev, T > 1 ? group : nullptr, false, 1, R, cfg.embd);
    STRATA_CHECK(S >= 1 && R >= S, "a decoder of {} sequences needs at least 1 and at most max_rows {} of them", S, R);
    STRATA_CHECK(where.resident_layers <= cfg.layers, "--resident-layers {}: the model has {} layers",
                 where.resident_layers, cfg.layers);
    k = make_gpt_kernels(dev, matmul);
    lengths.assign(static_cast<std::size_t>(S), 0);
    units = gpt_units(cfg, T);
    const std::vector<SlotSpec>& first = units[static_cast<std::size_t>(block_unit(0))].slots;
    STRATA_CHECK(first.size() == kCount, "a block has {} parameters, the decoder knows {}", first.size(),
                 static_cast<int>(kCount));
    for (std::size_t i = 0; i < kCount; ++i) {
      offset[i] = block_floats;
      size[i] = shape_numel(first[i].shape);
      block_floats += size[i];
    }
    const std::size_t C = static_cast<std::size_t>(cfg.embd), Vl = static_cast<std::size_t>(shard.rows);
    const std::size_t cl = static_cast<std::size_t>(Cl), t = static_cast<std::size_t>(T);
    const std::size_t r = static_cast<std::size_t>(R);
    const std::size_t block_bytes = block_floats * 4;
    // Device memory other than the blocks: embeddings and final norm, the cache, the workspace.
    const std::size_t outside = (Vl * C + static_cast<std::size_t>(cfg.ctx) * C + 2 * C) * 4;
    const std::size_t cache = static_cast<std::size_t>(S) * static_cast<std::size_t>(cfg.ctx) * cl * 4;
    // The workspace below: tokens, mean and rstd (a float each a row), x, x2, ln, tmp and last (C), qkv (3 Cl), atty
    // (Cl), fch and fchg (4 Cl), lse (this rank's heads), the logits (Vl) and, under tp, the group's (T Vl).
    const std::size_t workspace =
        r * (3 + 5 * C + 12 * cl + static_cast<std::size_t>(NHl) + Vl + (T > 1 ? t * Vl : 0)) * 4;
    const int L = cfg.layers, depth = where.prefetch_depth;
    // The KV cache in device memory, or a host cache's staging slots there.
    const std::size_t cache_layers = static_cast<std::size_t>(where.kv_on_host ? KvCache::staging_slots(depth, L) : L);
    const std::size_t fixed = outside + 2 * cache_layers * cache + workspace;
    STRATA_CHECK(where.source != WeightSource::kDevice || shard_group,
                 "--weights-from device keeps each rank's part of the streamed blocks in device memory: it needs "
                 "--shard-weights over 2 or more ranks (with one, keep the blocks resident)");
    // The streamed blocks' slots (and kDevice's parts) as the stream will hold them.
    const int shards = shard_group ? shard_group->size() : 1;
    auto slots_for = [&](int resident_blocks) {
      return resident_blocks < L ? BlockStreamer::slot_count(depth, L - resident_blocks) : 0;
    };
    auto need = [&](int resident_blocks) {
      return fixed + static_cast<std::size_t>(resident_blocks) * block_bytes +
             BlockStreamer::device_bytes(block_bytes, L - resident_blocks, where.source, depth, shards);
    };
    int resident_blocks = where.resident_layers >= 0 ? where.resident_layers : L;
    const std::uint64_t budget = where.device_memory;
    if (budget > 0 && where.resident_layers < 0)
      while (resident_blocks > 0 && need(resident_blocks) > budget) --resident_blocks;
    if (shard_group) {  // the group streams the same blocks: as few resident as on any of its ranks
      const std::vector<double> all = all_gather_values(*shard_group, resident_blocks);
      resident_blocks = static_cast<int>(*std::min_element(all.begin(), all.end()));
    }
    STRATA_CHECK_CODE(
        ErrorCode::kOutOfMemory, budget == 0 || need(resident_blocks) <= budget,
        "--device-memory {}: the decoder needs {} with {} of {} blocks resident (embeddings and final norm {}, KV "
        "cache{} {} for {} sequences of {} positions, workspace {}, {} resident and {} stream slot(s) of {} a "
        "block{}); the least, every block streamed with --prefetch 0, is {}: give at least that, fewer sequences, or a "
        "shorter context (strata-plan --inference sizes the placements)",
        bytes_text(budget), bytes_text(need(resident_blocks)), resident_blocks, L, bytes_text(outside),
        where.kv_on_host ? fmt::format(" staging ({} of {} layers)", cache_layers, L) : std::string(),
        bytes_text(2 * cache_layers * cache), S, cfg.ctx, bytes_text(workspace), resident_blocks,
        slots_for(resident_blocks), bytes_text(block_bytes),
        where.source == WeightSource::kDevice ? fmt::format(", and this rank's part of each streamed block, {}",
                                                            bytes_text(shard_part(block_bytes, shards)))
                                              : std::string(),
        bytes_text(fixed + BlockStreamer::device_bytes(block_bytes, L, where.source, 0, shards)));
    held = need(resident_blocks);

    // Every parameter from `read`, in gpt_units' order, through one host buffer.
    std::vector<float> hostbuf;
    auto load = [&](const SlotSpec& s) {
      const std::size_t n = shape_numel(s.shape);
      hostbuf.assign(n, 0.0f);  // a padded vocabulary's rows stay 0
      read_slot(s, 0, n, hostbuf.data());
      Buffer b = dev.allocate(n * 4, MemCategory::kParamShard);
      dev.copy_from_host(b.data(), hostbuf.data(), n * 4);
      param_bytes += n * 4;
      return b;
    };
    const std::vector<SlotSpec>& emb = units[static_cast<std::size_t>(embeddings_unit())].slots;
    wte = load(emb[0]);
    wpe = load(emb[1]);
    hostbuf.resize(block_floats);
    for (int l = 0; l < resident_blocks; ++l) {
      read_block(l, hostbuf.data());
      resident.push_back(dev.allocate(block_bytes, MemCategory::kParamShard));
      dev.copy_from_host(resident.back().data(), hostbuf.data(), block_bytes);
    }
    param_bytes += static_cast<std::uint64_t>(L) * block_bytes;
    const std::vector<SlotSpec>& lnf = units[static_cast<std::size_t>(final_norm_unit(cfg))].slots;
    lnf_w = load(lnf[0]);
    lnf_b = load(lnf[1]);
    if (resident_blocks < L)
      stream = std::make_unique<BlockStreamer>(
          dev, block_bytes, L - resident_blocks, where.source, depth,
          [this, resident_blocks](int j, std::size_t begin, std::size_t bytes, void* out) {
            read_block(resident_blocks + j, static_cast<float*>(out), begin / 4, bytes / 4);
          },
          MemCategory::kParamShard, shard_group);
    kv = std::make_unique<KvCache>(dev, L, S, cfg.ctx, Cl, where.kv_on_host, depth);
    auto ws = [&](std::size_t floats) { return dev.allocate(floats * 4, MemCategory::kWorkspace); };
    tokens = dev.allocate(r * 4, MemCategory::kWorkspace);
    x = ws(r * C);
    x2 = ws(r * C);
    ln = ws(r * C);
    mean = ws(r);
    rstd = ws(r);
    qkv = ws(r * 3 * cl);
    atty = ws(r * cl);
    lse = ws(r * static_cast<std::size_t>(NHl));
    tmp = ws(r * C);
    fch = ws(r * 4 * cl);
    fchg = ws(r * 4 * cl);
    last = ws(r * C);
    logits = ws(r * Vl);
    if (T > 1) gathered = ws(r * t * Vl);
  }

  // Elements [begin, begin + n) of this rank's slice of a parameter through `read`: the runs of the slice in the whole
  // tensor.
  void read_slot(const SlotSpec& s, std::size_t begin, std::size_t n, float* out) const {
    if (T == 1 || s.tp.replicated()) {
      read(s.name, begin, n, out);
      return;
    }
    for_each_global_run(s.tp, trank, T, begin, n, [&](std::size_t local, std::size_t global, std::size_t len) {
      read(s.name, global, len, out + (local - begin));
    });
  }

  // Floats [begin, begin + n) of block `l`'s parameters (this rank's slices), packed as `offset` says: the whole
  // block by default, one rank's part of it under a shard group.
  void read_block(int l, float* out, std::size_t begin = 0, std::size_t n = SIZE_MAX) const {
    const std::vector<SlotSpec>& p = units[static_cast<std::size_t>(block_unit(l))].slots;
    const std::size_t end = std::min(block_floats, n == SIZE_MAX ? block_floats : begin + n);
    for (std::size_t i = 0; i < kCount; ++i) {
      const std::size_t lo = std::max(begin, offset[i]), hi = std::min(end, offset[i] + size[i]);
      if (lo < hi) read_slot(p[i], lo - offset[i], hi - lo, out + (lo - begin));
    }
  }

  // out = inp @ weight + bias for a row-parallel product: this rank's partial sums reduced over the group, then the
  // bias (fused into the product at tp 1).
  void row_parallel(float* out, const float* inp, const float* weight, const float* bias, int rows, int IC) {
    const int C = cfg.embd;
    if (T == 1) {
      k->matmul_forward(out, inp, weight, bias, rows, IC, C);
      return;
    }
    k->matmul_forward(out, inp, weight, nullptr, rows, IC, C);
    tp->sum(out, static_cast<std::size_t>(rows) * static_cast<std::size_t>(C));
    k->add_bias(out, bias, rows, C);
  }

  // Block `l`'s packed parameters in device memory: resident, or its stream slot once its copy has arrived.
  const float* block(int l) {
    const int r = static_cast<int>(resident.size());
    if (l < r) return resident[static_cast<std::size_t>(l)].as<float>();
    return static_cast<const float*>(stream->acquire(l - r));
  }

  // After block `l`'s kernels: a streamed block's slot takes the next copy.
  void done_with(int l) {
    if (l >= static_cast<int>(resident.size())) stream->release();
  }

  void check_seq(int seq) const {
    STRATA_CHECK(seq >= 0 && seq < S, "sequence {} is outside the decoder's [0, {})", seq, S);
  }

  // A pass over no rows, in step with the shard group: the streamed blocks acquired and released in turn, so this
  // rank's part of each goes into the group's gathers.
  void idle_pass() {
    if (!stream) return;
    for (int l = static_cast<int>(resident.size()); l < cfg.layers; ++l) {
      block(l);
      done_with(l);
    }
  }

  // One pass over `groups` (rows of `toks`, host memory): the cache grows by each group's rows; `want` lists the
  // rows whose logits are computed, into logits rows 0.. in that order.
  void pass(const std::vector<Group>& groups, const std::int32_t* toks, int rows, const std::vector<int>& want) {
    const int C = cfg.embd, V = cfg.vocab;
    const std::size_t Cz = static_cast<std::size_t>(C), ctx = static_cast<std::size_t>(cfg.ctx);
    const std::size_t cl = static_cast<std::size_t>(Cl);
    for (int i = 0; i < rows; ++i)
      STRATA_CHECK(toks[i] >= 0 && toks[i] < V, "token {} at row {} is outside the vocabulary [0, {})", toks[i], i, V);
    for (const Group& g : groups)
      STRATA_CHECK(g.pos + g.n <= cfg.ctx,
                   "sequence {}: {} positions cached and {} more pass the model's context of {} positions", g.seq,
                   g.pos, g.n, cfg.ctx);
    k->upload_tokens(tokens.as<std::int32_t>(), toks, static_cast<std::size_t>(rows));
    float* X = x.as<float>();
    const std::size_t rc = static_cast<std::size_t>(rows) * Cz;
    if (T == 1) {
      for (const Group& g : groups)  // token and position embeddings at each group's positions
        k->encoder_forward(X + static_cast<std::size_t>(g.row) * Cz, tokens.as<std::int32_t>() + g.row,
                           wte.as<float>(), wpe.as<float>() + static_cast<std::size_t>(g.pos) * Cz, 1, g.n, C);
    } else {
      // Each rank looks up the tokens of its vocabulary rows (0 for the others); the sum is the embedding.
      k->embedding_forward(X, tokens.as<std::int32_t>(), wte.as<float>(), shard.begin, shard.valid, rows, C);
      tp->sum(X, rc);
      for (const Group& g : groups)
        k->position_forward(X + static_cast<std::size_t>(g.row) * Cz, wpe.as<float>(), 1, g.n, g.pos, C);
    }
    std::vector<KvCache::Span> spans;
    for (const Group& g : groups) spans.push_back(KvCache::Span{g.seq, g.pos, g.n});
    kv->begin_pass(spans);
    for (int l = 0; l < cfg.layers; ++l) {
      const float* base = block(l);
      auto P = [&](BlockParam i) { return base + offset[static_cast<std::size_t>(i)]; };
      k->layernorm_forward(ln.as<float>(), mean.as<float>(), rstd.as<float>(), X, P(kLn1W), P(kLn1B), rows, C);
      k->matmul_forward(qkv.as<float>(), ln.as<float>(), P(kAttnW), P(kAttnB), rows, C, 3 * Cl);
      const KvCache::Layer cache = kv->acquire(l);
      float* kc = cache.keys;
      float* vc = cache.values;
      for (const Group& g : groups) {
        const std::size_t at = static_cast<std::size_t>(g.seq) * ctx * cl;
        const float* q = qkv.as<float>() + static_cast<std::size_t>(g.row) * 3 * cl;
        k->copy_rows(RowsOut{kc + at + static_cast<std::size_t>(g.pos) * cl, cl, 0}, Rows{q + cl, 3 * cl, 0}, 1, g.n,
                     Cl, false);
        k->copy_rows(RowsOut{vc + at + static_cast<std::size_t>(g.pos) * cl, cl, 0}, Rows{q + 2 * cl, 3 * cl, 0}, 1,
                     g.n, Cl, false);
        AttentionBlock blk;
        blk.batch = 1;
        blk.heads = NHl;
        blk.width = Cl;
        blk.q_rows = g.n;
        blk.q_pos = g.pos;
        blk.kv_rows = g.pos + g.n;
        blk.kv_pos = 0;
        k->attention_block_forward(blk, RowsOut{atty.as<float>() + static_cast<std::size_t>(g.row) * cl, cl, 0},
                                   RowStatsOut{lse.as<float>(), static_cast<std::size_t>(g.n), 0}, Rows{q, 3 * cl, 0},
                                   Rows{kc + at, cl, 0}, Rows{vc + at, cl, 0});
        cache_read += 2ull * static_cast<std::uint64_t>(g.pos + g.n) * cl * 4;
      }
      kv->release(l);
      row_parallel(tmp.as<float>(), atty.as<float>(), P(kProjW), P(kProjB), rows, Cl);
      k->residual_forward(x2.as<float>(), X, tmp.as<float>(), rc);
      k->layernorm_forward(ln.as<float>(), mean.as<float>(), rstd.as<float>(), x2.as<float>(), P(kLn2W), P(kLn2B), rows,
                           C);
      k->matmul_forward(fch.as<float>(), ln.as<float>(), P(kFcW), P(kFcB), rows, C, 4 * Cl);
      k->gelu_forward(fchg.as<float>(), fch.as<float>(), static_cast<std::size_t>(rows) * 4 * cl);
      row_parallel(tmp.as<float>(), fchg.as<float>(), P(kFcProjW), P(kFcProjB), rows, 4 * Cl);
      k->residual_forward(X, x2.as<float>(), tmp.as<float>(), rc);
      done_with(l);
    }
    for (const Group& g : groups) lengths[static_cast<std::size_t>(g.seq)] = g.pos + g.n;
    weight_read += param_bytes;
    // The final LayerNorm and the LM head on the wanted rows only.
    const int w = static_cast<int>(want.size());
    for (int i = 0; i < w; ++i)
      k->copy_rows(RowsOut{last.as<float>() + static_cast<std::size_t>(i) * Cz, Cz, 0},
                   Rows{X + static_cast<std::size_t>(want[static_cast<std::size_t>(i)]) * Cz, Cz, 0}, 1, 1, C, false);
    k->layernorm_forward(ln.as<float>(), mean.as<float>(), rstd.as<float>(), last.as<float>(), lnf_w.as<float>(),
                         lnf_b.as<float>(), w, C);
    const std::size_t Vz = static_cast<std::size_t>(V), wz = static_cast<std::size_t>(w);
    k->lm_head_forward(logits.as<float>(), ln.as<float>(), wte.as<float>(), w, C, shard.rows);
    host_logits.resize(wz * Vz);
    if (T == 1) {
      dev.compute_stream().synchronize();  // a CUDA device's transfer does not follow the compute stream
      dev.copy_to_host(host_logits.data(), logits.data(), host_logits.size() * 4);
      return;
    }
    // Every rank's columns of every wanted row, then each row put together without the padded columns.
    const std::size_t Vl = static_cast<std::size_t>(shard.rows);
    Stream& s = dev.compute_stream();
    group->all_gather(logits.data(), gathered.data(), wz * Vl, DType::kF32, s);
    s.synchronize();
    gathered_host.resize(static_cast<std::size_t>(T) * wz * Vl);
    dev.copy_to_host(gathered_host.data(), gathered.data(), gathered_host.size() * 4);
    for (int t = 0; t < T; ++t) {
      const VocabShard part = VocabShard::of(V, T, t);
      for (std::size_t i = 0; i < wz; ++i)
        std::memcpy(host_logits.data() + i * Vz + static_cast<std::size_t>(part.begin),
                    gathered_host.data() + (static_cast<std::size_t>(t) * wz + i) * Vl,
                    static_cast<std::size_t>(part.valid) * 4);
    }
  }
};

GptDecoder::GptDecoder(const GptConfig& cfg, Device& device, int sequences, const WeightReader& read, int max_rows,
                       DType matmul, const DecodePlacement& placement, Communicator* tp, Communicator* shard)
    : impl_(std::make_unique<Impl>(cfg, device, sequences, read, max_rows, matmul, placement, tp, shard)) {}

GptDecoder::~GptDecoder() = default;

const GptConfig& GptDecoder::config() const { return impl_->cfg; }
int GptDecoder::sequences() const { return impl_->S; }

int GptDecoder::length(int seq) const {
  impl_->check_seq(seq);
  return impl_->lengths[static_cast<std::size_t>(seq)];
}

void GptDecoder::reset(int seq) {
  impl_->check_seq(seq);
  impl_->lengths[static_cast<std::size_t>(seq)] = 0;
}

const float* GptDecoder::prefill(int seq, const std::int32_t* tokens, int n, float* all_logits) {
  impl_->check_seq(seq);
  STRATA_CHECK(n >= 1, "prefill of sequence {}: {} tokens (at least 1)", seq, n);
  const int start = impl_->lengths[static_cast<std::size_t>(seq)];
  STRATA_CHECK(start + n <= impl_->cfg.ctx,
               "sequence {}: {} positions cached and {} more pass the model's context of {} positions", seq, start, n,
               impl_->cfg.ctx);
  const std::size_t V = static_cast<std::size_t>(impl_->cfg.vocab);
  for (int done = 0; done < n;) {
    const int m = std::min(impl_->R, n - done);
    std::vector<int> want;
    if (all_logits) {
      for (int i = 0; i < m; ++i) want.push_back(i);
    } else {
      want.push_back(m - 1);
    }
    impl_->pass({Group{seq, 0, m, start + done}}, tokens + done, m, want);
    if (all_logits)
      std::memcpy(all_logits + static_cast<std::size_t>(done) * V, impl_->host_logits.data(),
                  static_cast<std::size_t>(m) * V * 4);
    done += m;
  }
  const std::size_t last = impl_->host_logits.size() / V - 1;
  return impl_->host_logits.data() + last * V;
}

const float* GptDecoder::decode(const std::vector<int>& seqs, const std::vector<std::int32_t>& tokens) {
  const int n = static_cast<int>(seqs.size());
  STRATA_CHECK(n >= 1 && n <= impl_->R && tokens.size() == seqs.size(),
               "decode of {} sequences with {} tokens: one token each, 1 to {} sequences", n, tokens.size(), impl_->R);
  std::vector<Group> groups;
  std::vector<int> want;
  std::vector<bool> seen(static_cast<std::size_t>(impl_->S), false);
  for (int i = 0; i < n; ++i) {
    const int s = seqs[static_cast<std::size_t>(i)];
    impl_->check_seq(s);
    STRATA_CHECK(!seen[static_cast<std::size_t>(s)], "decode: sequence {} is listed twice", s);
    seen[static_cast<std::size_t>(s)] = true;
    groups.push_back(Group{s, i, 1, impl_->lengths[static_cast<std::size_t>(s)]});
    want.push_back(i);
  }
  impl_->pass(groups, tokens.data(), n, want);
  return impl_->host_logits.data();
}

std::uint64_t GptDecoder::weight_bytes_read() const { return impl_->weight_read; }
std::uint64_t GptDecoder::cache_bytes_read() const { return impl_->cache_read; }
std::uint64_t GptDecoder::streamed_bytes_read() const { return impl_->stream ? impl_->stream->bytes_streamed() : 0; }
std::uint64_t GptDecoder::gathered_bytes_read() const { return impl_->stream ? impl_->stream->bytes_gathered() : 0; }
Communicator* GptDecoder::lockstep_group() { return impl_->stream ? impl_->shard_group : nullptr; }
void GptDecoder::idle_pass() { impl_->idle_pass(); }
int GptDecoder::prefill_passes(int n) const { return n > 0 ? (n + impl_->R - 1) / impl_->R : 0; }
int GptDecoder::copy_threads() const { return impl_->stream ? impl_->stream->host_copy_threads() : 0; }
std::uint64_t GptDecoder::weight_shard_bytes() const { return impl_->stream ? impl_->stream->held_bytes() : 0; }
std::uint64_t GptDecoder::weight_bytes() const { return impl_->param_bytes; }
int GptDecoder::resident_layers() const { return static_cast<int>(impl_->resident.size()); }
std::uint64_t GptDecoder::resident_weight_bytes() const {
  const std::uint64_t streamed = static_cast<std::uint64_t>(impl_->cfg.layers) - impl_->resident.size();
  return impl_->param_bytes - streamed * impl_->block_floats * 4;
}
std::uint64_t GptDecoder::stream_slot_bytes() const { return impl_->stream ? impl_->stream->slot_bytes() : 0; }
std::uint64_t GptDecoder::device_bytes() const { return impl_->held; }
std::uint64_t GptDecoder::cache_bytes() const { return impl_->kv->on_host() ? 0 : impl_->kv->device_bytes(); }
std::uint64_t GptDecoder::cache_staging_bytes() const {
  return impl_->kv->on_host() ? impl_->kv->device_bytes() : 0;
}
std::uint64_t GptDecoder::cache_host_bytes() const { return impl_->kv->host_bytes(); }
std::uint64_t GptDecoder::cache_link_bytes() const { return impl_->kv->link_bytes(); }

}  // namespace strata::gpt
