// GptDecoder: a pass over rows of several sequences, each layer's products on all of them at once, attention per
// sequence against its cache. Either family's block (gpt_model.h): the family picks the norm, the positions (learned,
// or q and k rotated at each row's own position), the MLP's activation, the biases and the head.
#include "models/gpt/inference/gpt_decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "collectives/rank_values.h"
#include "core/byte_units.h"
#include "core/error.h"
#include "kernels/cpu/rope.h"
#include "kernels/kernel_table.h"
#include "models/gpt/model/block_activations.h"
#include "models/gpt/model/block_pass.h"
#include "models/gpt/model/unit_slots.h"
#include "models/gpt/parallel/gpt_parallelize.h"
#include "runtime/inference/block_streamer.h"
#include "runtime/inference/kv_cache.h"
#include "runtime/parallel/tp_split.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/tensor/tensor_parallel.h"
#include "runtime/tensor/vocab_parallel.h"

namespace strata::gpt {
namespace {

// Consecutive rows of one sequence in a pass: rows [row, row + n) at positions [pos, pos + n).
struct Group {
  int seq = 0, row = 0, n = 0, pos = 0;
};

std::size_t numel_of(const UnitSpec& u) {
  std::size_t n = 0;
  for (const SlotSpec& s : u.slots) n += shape_numel(s.shape);
  return n;
}

}  // namespace

void DecodePlacement::validate() const {
  STRATA_CHECK(prefetch_depth >= 0 && prefetch_depth <= 8, "--prefetch {} must be in [0, 8]", prefetch_depth);
  STRATA_CHECK(resident_layers >= -1, "--resident-layers {} must be -1 (as many as fit) or more", resident_layers);
}

struct GptDecoder::Impl : BlockOps {
  GptConfig cfg;
  Device& dev;
  std::unique_ptr<Kernels> k;
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
  // tp degree and rank; this rank's query and key-value heads; a head's channels.
  int T = 1, trank = 0, NHl = 0, KVHl = 0, D = 0;
  // This rank's widths of a block's rows, as training's: q | k | v, the attention's output (q's), the MLP's up product
  // and its activation; kvw: k's (and v's), the floats each layer and position add to the cache for keys and values.
  BlockWidths w;
  std::size_t kvw = 0;
  BlockSlots bs;  // where each weight sits in a block, the embeddings and the final norm (-1: the family has none)
  EmbeddingSlots es;
  NormSlots ns;
  VocabShard shard;
  std::unique_ptr<TensorParallel> tp;  // R rows, no sequence parallelism: a pass runs over the first of them
  std::optional<BlockLinears> linears;
  std::vector<UnitSpec> units;  // parallelize(cfg, T).units: this rank's slices
  // A block's parameters packed in one buffer, in gpt_units' slot order: floats [offset[i], offset[i] + size[i]).
  std::vector<std::size_t> offset, size;
  std::size_t block_floats = 0;
  // In device memory always: the token table, GPT-2's positions, the final norm, an untied head (Llama's "output"),
  // Llama's rotary table of every position [ctx, D / 2].
  Buffer wte, wpe, lnf_w, lnf_b, head, rope_cos, rope_sin;
  std::vector<Buffer> resident;  // the first `resident.size()` blocks
  // Blocks resident.size() .. layers - 1 stream through `stream` (block j of it is layer resident.size() + j).
  std::unique_ptr<BlockStreamer> stream;
  std::uint64_t held = 0;  // device memory the decoder holds: the budget's `need` of its placement
  std::unique_ptr<KvCache> kv;  // per layer: keys and values [S, ctx, kvw], in device or host memory
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
    NHl = cfg.heads / T;
    KVHl = cfg.kv_local(T);
    D = cfg.hd();
    w = BlockWidths::of(cfg, static_cast<std::uint64_t>(R), static_cast<std::uint64_t>(R), T, 1);
    kvw = static_cast<std::size_t>(w.qkv - w.att) / 2;
    bs = block_slots(cfg);
    es = embedding_slots(cfg);
    ns = final_norm_slots(cfg);
    shard = VocabShard::of(cfg.vocab, T, trank);
    tp = std::make_unique<TensorParallel>(dev, T > 1 ? group : nullptr, false, 1, R, cfg.embd);
    STRATA_CHECK(S >= 1 && R >= S, "a decoder of {} sequences needs at least 1 and at most max_rows {} of them", S, R);
    STRATA_CHECK(where.resident_layers <= cfg.layers, "--resident-layers {}: the model has {} layers",
                 where.resident_layers, cfg.layers);
    k = make_kernels(dev, matmul);
    linears.emplace(*tp, *k, cfg);
    lengths.assign(static_cast<std::size_t>(S), 0);
    units = parallelize(cfg, T, ShardingOptions{}).units;  // the family's plan at tp T, no pipeline
    for (const SlotSpec& s : units[static_cast<std::size_t>(block_unit(0))].slots) {
      offset.push_back(block_floats);
      size.push_back(shape_numel(s.shape));
      block_floats += size.back();
    }
    const int resident_blocks = place(where);
    load_weights(resident_blocks, where);
    kv = std::make_unique<KvCache>(dev, cfg.layers, S, cfg.ctx, static_cast<int>(kvw), where.kv_on_host,
                                   where.prefetch_depth);
    allocate_workspace();
  }

  // The widths of a pass's rows as the planner counts them (its workspace is allocate_workspace's).
  DecodeRowWidths row_widths() const {
    DecodeRowWidths rw;
    rw.hidden = cfg.embd;
    rw.qkv = static_cast<double>(w.qkv);
    rw.att = static_cast<double>(w.att);
    rw.up = static_cast<double>(w.up);
    rw.act = static_cast<double>(w.act);
    rw.heads = NHl;
    rw.vocab_rows = shard.rows;
    rw.tp = T;
    return rw;
  }

  // What this decoder holds in device memory, by the planner's categories (inference_planner.h), from its own units:
  // every unit other than the blocks (embeddings, final norm, an untied head), Llama's rotary table (cos and sin,
  // D / 2 each a position), a block, a layer of the cache, the workspace of R rows.
  DecodeMemory memory(const DecodePlacement& where) const {
    DecodeMemory m;
    m.layers = cfg.layers;
    for (int u = 0; u < static_cast<int>(units.size()); ++u)
      if (u < block_unit(0) || u > block_unit(cfg.layers - 1))
        m.outside += static_cast<double>(numel_of(units[static_cast<std::size_t>(u)])) * 4;
    m.tables = cfg.llama() ? static_cast<double>(cfg.ctx) * D * 4 : 0;
    m.block = static_cast<double>(block_floats) * 4;
    m.kv_layer = static_cast<double>(S) * cfg.ctx * static_cast<double>(kvw) * 2 * 4;
    m.workspace = R * row_widths().floats_per_row() * 4;
    m.source = where.source;
    m.prefetch_depth = where.prefetch_depth;
    m.shard = shard_group ? shard_group->size() : 1;
    return m;
  }

  // The blocks kept resident under `where` (as many as its budget holds when it gives one and no count, by the
  // planner's rule; as few as on any rank of a shard group), and `held`: the device memory that placement needs.
  // kOutOfMemory naming the least placement when the budget is smaller than the one asked for.
  int place(const DecodePlacement& where) {
    STRATA_CHECK(where.source != WeightSource::kDevice || shard_group,
                 "--weights-from device keeps each rank's part of the streamed blocks in device memory: it needs "
                 "--shard-weights over 2 or more ranks (with one, keep the blocks resident)");
    const DecodeMemory m = memory(where);
    const int L = cfg.layers;
    const bool host_kv = where.kv_on_host;
    auto need = [&](int resident_blocks) { return static_cast<std::uint64_t>(m.total(resident_blocks, host_kv)); };
    const std::uint64_t budget = where.device_memory;
    int resident_blocks = where.resident_layers >= 0 ? where.resident_layers : L;
    if (budget > 0 && where.resident_layers < 0)
      resident_blocks = m.most_resident(static_cast<double>(budget), host_kv);
    if (shard_group) {  // the group streams the same blocks: as few resident as on any of its ranks
      const std::vector<double> all = all_gather_values(*shard_group, resident_blocks);
      resident_blocks = static_cast<int>(*std::min_element(all.begin(), all.end()));
    }
    STRATA_CHECK_CODE(
        ErrorCode::kOutOfMemory, budget == 0 || need(resident_blocks) <= budget,
        "--device-memory {}: the decoder needs {} with {} of {} blocks resident (embeddings, final norm and head {}, "
        "KV cache{} {} for {} sequences of {} positions, workspace {}, {} resident and {} stream slot(s) of {} a "
        "block{}); the least, every block streamed with --prefetch 0, is {}: give at least that, fewer sequences, or a "
        "shorter context (strata-plan --inference sizes the placements)",
        bytes_text(budget), bytes_text(need(resident_blocks)), resident_blocks, L,
        bytes_text(static_cast<std::uint64_t>(m.outside + m.tables)),
        host_kv ? fmt::format(" staging ({} of {} layers)", m.kv_layers(true), L) : std::string(),
        bytes_text(static_cast<std::uint64_t>(m.kv_bytes(host_kv))), S, cfg.ctx,
        bytes_text(static_cast<std::uint64_t>(m.workspace)), resident_blocks, m.slots(resident_blocks),
        bytes_text(static_cast<std::uint64_t>(m.block)),
        where.source == WeightSource::kDevice
            ? fmt::format(", and this rank's part of each streamed block, {}",
                          bytes_text(shard_part(static_cast<std::size_t>(m.block), m.shard)))
            : std::string(),
        bytes_text(least(m, host_kv)));
    held = need(resident_blocks);
    return resident_blocks;
  }

  // The least device memory `m` can take with its KV cache: every block streamed through one slot (prefetch 0).
  static std::uint64_t least(const DecodeMemory& m, bool host_kv) {
    DecodeMemory one_slot = m;
    one_slot.prefetch_depth = 0;
    return static_cast<std::uint64_t>(m.outside + m.tables + one_slot.slot_bytes(0) + m.shard_bytes(0) +
                                      m.kv_bytes(host_kv) + m.workspace);
  }

  Buffer upload(const std::vector<float>& host, MemCategory kind) {
    Buffer b = dev.allocate(host.size() * 4, kind);
    dev.copy_from_host(b.data(), host.data(), host.size() * 4);
    return b;
  }

  // Every parameter from `read`, in gpt_units' order, through one host buffer: the units other than the blocks and the
  // first `resident_blocks` blocks into device memory, the others to the stream; Llama's rotary table.
  void load_weights(int resident_blocks, const DecodePlacement& where) {
    std::vector<float> hostbuf;
    auto load = [&](int unit, int slot) {
      if (slot < 0) return Buffer();  // a weight the family does not have
      const SlotSpec& s = units[static_cast<std::size_t>(unit)].slots[static_cast<std::size_t>(slot)];
      const std::size_t n = shape_numel(s.shape);
      hostbuf.assign(n, 0.0f);  // a padded vocabulary's rows stay 0
      read_slot(s, 0, n, hostbuf.data());
      param_bytes += n * 4;
      return upload(hostbuf, MemCategory::kParamShard);
    };
    wte = load(embeddings_unit(), es.wte);
    wpe = load(embeddings_unit(), es.wpe);
    const int L = cfg.layers;
    hostbuf.resize(block_floats);
    for (int l = 0; l < resident_blocks; ++l) {
      read_block(l, hostbuf.data());
      resident.push_back(upload(hostbuf, MemCategory::kParamShard));
    }
    param_bytes += static_cast<std::uint64_t>(L) * block_floats * 4;
    lnf_w = load(final_norm_unit(cfg), ns.w);
    lnf_b = load(final_norm_unit(cfg), ns.b);
    if (!cfg.tied) head = load(final_norm_unit(cfg) + 1, 0);  // the "output" unit follows the final norm
    if (cfg.llama()) {
      const std::size_t n = static_cast<std::size_t>(cfg.ctx) * static_cast<std::size_t>(D / 2);
      std::vector<float> sn(n);
      hostbuf.assign(n, 0.0f);
      cpu::rope_table(hostbuf.data(), sn.data(), cfg.ctx, D, cfg.rope_theta, cfg.rope_scaling);
      rope_cos = upload(hostbuf, MemCategory::kWorkspace);
      rope_sin = upload(sn, MemCategory::kWorkspace);
    }
    if (resident_blocks < L)
      stream = std::make_unique<BlockStreamer>(
          dev, block_floats * 4, L - resident_blocks, where.source, where.prefetch_depth,
          [this, resident_blocks](int j, std::size_t begin, std::size_t bytes, void* out) {
            read_block(resident_blocks + j, static_cast<float*>(out), begin / 4, bytes / 4);
          },
          MemCategory::kParamShard, shard_group);
  }

  void allocate_workspace() {
    const std::size_t C = static_cast<std::size_t>(cfg.embd), Vl = static_cast<std::size_t>(shard.rows);
    const std::size_t r = static_cast<std::size_t>(R);
    auto ws = [&](std::size_t floats) { return dev.allocate(floats * 4, MemCategory::kWorkspace); };
    tokens = dev.allocate(r * 4, MemCategory::kWorkspace);
    x = ws(r * C);
    x2 = ws(r * C);
    ln = ws(r * C);
    mean = ws(r);
    rstd = ws(r);
    qkv = ws(r * w.qkv);
    atty = ws(r * w.att);
    lse = ws(r * static_cast<std::size_t>(NHl));
    tmp = ws(r * C);
    fch = ws(r * w.up);
    fchg = ws(r * w.act);
    last = ws(r * C);
    logits = ws(r * Vl);
    if (T > 1) gathered = ws(r * static_cast<std::size_t>(T) * Vl);
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
    for (std::size_t i = 0; i < p.size(); ++i) {
      const std::size_t lo = std::max(begin, offset[i]), hi = std::min(end, offset[i] + size[i]);
      if (lo < hi) read_slot(p[i], lo - offset[i], hi - lo, out + (lo - begin));
    }
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

  // BlockOps: the decode pass's arithmetic on its `pass_rows` rows (block_pass.h): the products through training's
  // tp pieces (BlockLinears) on whole rows, each tp rank its columns, the row-parallel ones summed over tp; the
  // norms' statistics are scratch.
  int pass_rows = 0;
  void norm(float* out, float* mu, float* rs, const float* in, const float* weight, const float* bias) override {
    family_norm(*k, cfg, out, mu, rs, in, weight, bias, pass_rows);
  }
  void column(bool attention, float* out, const float* in, const float* weight, const float* bias) override {
    linears->column(attention).forward(out, in, nullptr, weight, bias, pass_rows);
  }
  const float* row(bool attention, const float* in, const float* weight, const float* bias) override {
    return row_product(*k, linears->row(attention), T > 1, tmp.as<float>(), nullptr, in, weight, bias, pass_rows);
  }
  void mlp_act(float* out, const float* up) override { family_mlp_activation(*k, cfg, out, up, pass_rows, w.act); }
  void residual(float* out, const float* a, const float* b) override {
    k->residual_forward(out, a, b, static_cast<std::size_t>(pass_rows) * static_cast<std::size_t>(cfg.embd));
  }

  // The embeddings of the pass's tokens into x: GPT-2's token and position tables at each group's positions; the token
  // table alone (Llama: positions are rotations in the attention); under tp each rank's vocabulary rows (0 for the
  // others) summed over the group, then the positions.
  void embed(const std::vector<Group>& groups, int rows) {
    const int C = cfg.embd;
    const std::size_t Cz = static_cast<std::size_t>(C);
    float* X = x.as<float>();
    const std::int32_t* tok = tokens.as<std::int32_t>();
    if (T == 1 && es.wpe >= 0) {
      for (const Group& g : groups)
        k->encoder_forward(X + static_cast<std::size_t>(g.row) * Cz, tok + g.row, wte.as<float>(),
                           wpe.as<float>() + static_cast<std::size_t>(g.pos) * Cz, 1, g.n, C);
      return;
    }
    k->embedding_forward(X, tok, wte.as<float>(), shard.begin, shard.valid, rows, C);
    if (T > 1) tp->sum(X, static_cast<std::size_t>(rows) * Cz);
    if (es.wpe < 0) return;
    for (const Group& g : groups)
      k->position_forward(X + static_cast<std::size_t>(g.row) * Cz, wpe.as<float>(), 1, g.n, g.pos, C);
  }

  // Layer `l`'s attention core over the pass's q | k | v rows into atty: each group's q and k heads rotated at their
  // positions (Llama), its keys and values into the cache at its positions, its queries against the cache up to them
  // (lse: a group's scratch).
  void attend(int l, const std::vector<Group>& groups, float* atty, float* lse, float* qkv) {
    const std::size_t ctx = static_cast<std::size_t>(cfg.ctx), s = w.qkv, q = w.att;
    const KvCache::Layer cache = kv->acquire(l);
    for (const Group& g : groups) {
      float* row = qkv + static_cast<std::size_t>(g.row) * s;
      if (cfg.llama()) {
        k->rope_forward(row, rope_cos.as<float>(), rope_sin.as<float>(), 1, g.n, NHl, D, g.pos, s, 0);
        k->rope_forward(row + q, rope_cos.as<float>(), rope_sin.as<float>(), 1, g.n, KVHl, D, g.pos, s, 0);
      }
      const std::size_t at = static_cast<std::size_t>(g.seq) * ctx * kvw;  // the sequence's cache
      const std::size_t end = at + static_cast<std::size_t>(g.pos) * kvw;  // its first new position
      k->copy_rows(RowsOut{cache.keys + end, kvw, 0}, Rows{row + q, s, 0}, 1, g.n, static_cast<int>(kvw), false);
      k->copy_rows(RowsOut{cache.values + end, kvw, 0}, Rows{row + q + kvw, s, 0}, 1, g.n, static_cast<int>(kvw),
                   false);
      AttentionBlock blk;
      blk.batch = 1;
      blk.heads = NHl;
      blk.kv_heads = KVHl;
      blk.width = static_cast<int>(q);
      blk.q_rows = g.n;
      blk.q_pos = g.pos;
      blk.kv_rows = g.pos + g.n;
      blk.kv_pos = 0;
      k->attention_block_forward(blk, RowsOut{atty + static_cast<std::size_t>(g.row) * q, q, 0},
                                 RowStatsOut{lse, static_cast<std::size_t>(g.n), 0}, Rows{row, s, 0},
                                 Rows{cache.keys + at, kvw, 0}, Rows{cache.values + at, kvw, 0});
      cache_read += 2ull * static_cast<std::uint64_t>(g.pos + g.n) * kvw * 4;
    }
    kv->release(l);
  }

  // Block `l` on the pass's rows of x, in place, through the family's one block (block_pass.h) with the decode
  // attention: each group's rows against the KV cache (attend). One ln buffer serves both norms.
  void block_forward(int l, const std::vector<Group>& groups, int rows) {
    const float* base = block(l);
    pass_rows = rows;
    float* X = x.as<float>();
    float *mu = mean.as<float>(), *rs = rstd.as<float>();
    const BlockBuffers b{ln.as<float>(), mu, rs, qkv.as<float>(), atty.as<float>(), lse.as<float>(), x2.as<float>(),
                         ln.as<float>(), mu, rs, fch.as<float>(), fchg.as<float>()};
    gpt::block_forward(
        *this, bs, [&](int slot) { return slot < 0 ? nullptr : base + offset[static_cast<std::size_t>(slot)]; }, X, X,
        b, [&](float* out, float* stats, float* rows_qkv) { attend(l, groups, out, stats, rows_qkv); });
    done_with(l);
  }

  // One pass over `groups` (rows of `toks`, host memory): the cache grows by each group's rows; `want` lists the
  // rows whose logits are computed, into logits rows 0.. in that order.
  void pass(const std::vector<Group>& groups, const std::int32_t* toks, int rows, const std::vector<int>& want) {
    const int V = cfg.vocab;
    for (int i = 0; i < rows; ++i)
      STRATA_CHECK(toks[i] >= 0 && toks[i] < V, "token {} at row {} is outside the vocabulary [0, {})", toks[i], i, V);
    for (const Group& g : groups)
      STRATA_CHECK(g.pos + g.n <= cfg.ctx,
                   "sequence {}: {} positions cached and {} more pass the model's context of {} positions", g.seq,
                   g.pos, g.n, cfg.ctx);
    k->upload_tokens(tokens.as<std::int32_t>(), toks, static_cast<std::size_t>(rows));
    embed(groups, rows);
    std::vector<KvCache::Span> spans;
    for (const Group& g : groups) spans.push_back(KvCache::Span{g.seq, g.pos, g.n});
    kv->begin_pass(spans);
    for (int l = 0; l < cfg.layers; ++l) block_forward(l, groups, rows);
    for (const Group& g : groups) lengths[static_cast<std::size_t>(g.seq)] = g.pos + g.n;
    weight_read += param_bytes;
    head_forward(want);
  }

  // The final norm and the LM head (the token table when tied) on the wanted rows of x, into host_logits (gathered
  // whole from the tp group).
  void head_forward(const std::vector<int>& want) {
    const int C = cfg.embd, V = cfg.vocab;
    const std::size_t Cz = static_cast<std::size_t>(C);
    const int n = static_cast<int>(want.size());
    for (int i = 0; i < n; ++i)
      k->copy_rows(RowsOut{last.as<float>() + static_cast<std::size_t>(i) * Cz, Cz, 0},
                   Rows{x.as<float>() + static_cast<std::size_t>(want[static_cast<std::size_t>(i)]) * Cz, Cz, 0}, 1, 1,
                   C, false);
    family_norm(*k, cfg, ln.as<float>(), mean.as<float>(), rstd.as<float>(), last.as<float>(), lnf_w.as<float>(),
                lnf_b.as<float>(), n);
    const std::size_t Vz = static_cast<std::size_t>(V), wz = static_cast<std::size_t>(n);
    k->lm_head_forward(logits.as<float>(), ln.as<float>(), cfg.tied ? wte.as<float>() : head.as<float>(), n, C,
                       shard.rows);
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
