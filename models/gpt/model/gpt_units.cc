// The units of either family (the sharding runtime's view of the model), their pipeline parts, and the spec's init.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/hash.h"
#include "models/gpt/model/gpt_model.h"
#include "models/gpt/model/unit_slots.h"

namespace strata::gpt {

namespace {

// The Llama-style family's units in Strata's layout: every product's weight is [in, out] (x @ W, as GPT-2's Conv1D),
// q | k | v fused into one product and gate | up into another (weight_names.h maps them to Hugging Face's separate
// [out, in] tensors). Names follow torchtitan's llama. 2-D parameters are decayed, 1-D ones are not.
template <typename Slot>
std::vector<UnitSpec> llama_units(const GptConfig& c, Slot&& slot) {
  const std::int64_t C = c.embd, Q = c.q_width(), KV = c.kv_width(), F = c.mlp_width();
  std::vector<UnitSpec> units;
  units.push_back({"embeddings", {slot("tok_embeddings.weight", {c.vocab, C}, true, 0)}});
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    UnitSpec u{"layers." + std::to_string(i), {}};
    u.slots.push_back(slot(p + "attention_norm.weight", {C}, false));
    // Column-parallel q | k | v, parts of unequal widths under grouped-query attention: each tp rank holds its query
    // heads and its key-value heads, or above the key-value heads the one its query heads attend to, shared with
    // other tp ranks (atoms of a head's width; validate_tp: tp divides the kv heads or is divided by them).
    const std::int64_t D = c.hd();
    u.slots.push_back(slot(p + "attention.wqkv.weight", {C, Q + 2 * KV}, true, 1, 3, {Q, KV, KV}, D));
    if (c.qkv_bias) u.slots.push_back(slot(p + "attention.wqkv.bias", {Q + 2 * KV}, false, 0, 3, {Q, KV, KV}, D));
    u.slots.push_back(slot(p + "attention.wo.weight", {Q, C}, true, 0));  // row-parallel
    u.slots.push_back(slot(p + "ffn_norm.weight", {C}, false));
    u.slots.push_back(slot(p + "feed_forward.w13.weight", {C, 2 * F}, true, 1, 2));  // column-parallel, gate | up
    u.slots.push_back(slot(p + "feed_forward.w2.weight", {F, C}, true, 0));  // row-parallel
    units.push_back(std::move(u));
  }
  units.push_back({"norm", {slot("norm.weight", {C}, false)}});
  if (!c.tied) units.push_back({"output", {slot("output.weight", {c.vocab, C}, true, 0)}});
  return units;
}

}  // namespace

BlockSlots block_slots(const GptConfig& cfg) {
  BlockSlots s;
  if (!cfg.llama()) return BlockSlots{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  int next = 0;
  s.ln1w = next++;
  s.attnw = next++;
  if (cfg.qkv_bias) s.attnb = next++;
  s.projw = next++;
  s.ln2w = next++;
  s.fcw = next++;
  s.fcprojw = next++;
  return s;
}

EmbeddingSlots embedding_slots(const GptConfig& cfg) {
  return cfg.llama() ? EmbeddingSlots{0, -1} : EmbeddingSlots{0, 1};
}

NormSlots final_norm_slots(const GptConfig& cfg) { return cfg.llama() ? NormSlots{0, -1} : NormSlots{0, 1}; }

int vocab_per_rank(const GptConfig& cfg, int tp) { return (cfg.vocab + tp - 1) / tp; }

std::vector<UnitSpec> gpt_units(const GptConfig& c, int tp) {
  const std::int64_t C = c.embd;
  // A slot of global shape `g`, cut along `dim` (-1: replicated) in `parts` blocks over the tp ranks.
  auto slot = [tp](std::string name, std::vector<std::int64_t> g, bool decay, int dim = -1, int parts = 1,
                   std::vector<std::int64_t> part_sizes = {}, std::int64_t atom = 0) {
    SlotSpec s;
    s.name = std::move(name);
    s.shape = g;
    s.weight_decay = decay;
    if (dim >= 0) {
      s.tp = TpSplit{dim, parts, g, std::move(part_sizes), atom};
      s.shape = s.tp.local_shape(tp);
    }
    return s;
  };
  if (c.llama()) return llama_units(c, slot);
  std::vector<UnitSpec> units;
  // 2-D parameters are decayed, 1-D ones are not (spec, Step 4).
  units.push_back({"embeddings", {slot("wte.weight", {c.vocab, C}, true, 0), slot("wpe.weight", {c.ctx, C}, true)}});
  for (int i = 0; i < c.layers; ++i) {
    std::string p = "h." + std::to_string(i) + ".";
    units.push_back({"h." + std::to_string(i),
                     {slot(p + "ln_1.weight", {C}, false),
                      slot(p + "ln_1.bias", {C}, false),
                      slot(p + "attn.c_attn.weight", {C, 3 * C}, true, 1, 3),  // column-parallel, q|k|v by heads
                      slot(p + "attn.c_attn.bias", {3 * C}, false, 0, 3),
                      slot(p + "attn.c_proj.weight", {C, C}, true, 0),  // row-parallel
                      slot(p + "attn.c_proj.bias", {C}, false),
                      slot(p + "ln_2.weight", {C}, false),
                      slot(p + "ln_2.bias", {C}, false),
                      slot(p + "mlp.c_fc.weight", {C, 4 * C}, true, 1),  // column-parallel
                      slot(p + "mlp.c_fc.bias", {4 * C}, false, 0),
                      slot(p + "mlp.c_proj.weight", {4 * C, C}, true, 0),  // row-parallel
                      slot(p + "mlp.c_proj.bias", {C}, false)}});
  }
  units.push_back({"ln_f", {slot("ln_f.weight", {C}, false), slot("ln_f.bias", {C}, false)}});
  return units;
}

GptStagePart GptStagePart::of_rank(const GptConfig& cfg, int pp, int virtual_stages, int rank, int slots) {
  GptStagePart part;
  const std::vector<LayerRange> ranges = split_layers(cfg.layers, pp, virtual_stages);
  for (int v = 0; v < virtual_stages; ++v) part.chunks.push_back(ranges[static_cast<std::size_t>(v * pp + rank)]);
  part.first = rank == 0;
  part.last = rank == pp - 1;
  part.slots = slots;
  part.tied = cfg.tied;
  return part;
}

GptStageUnits stage_units(const GptConfig& cfg, const GptStagePart& part) {
  const std::vector<LayerRange> chunks = part.chunks.empty() ? std::vector<LayerRange>{{0, cfg.layers}} : part.chunks;
  GptStageUnits u;
  int next = 0;
  if (part.first) u.emb = 0;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    u.first.push_back(next);
    next += chunks[c].count() + (c == 0 && part.first ? 1 : 0);
    if (c + 1 == chunks.size() && part.last) {
      u.lnf = next++;
      u.head = part.first && cfg.tied ? u.emb : next++;
    }
  }
  u.first.push_back(next);
  return u;
}

std::vector<UnitSpec> gpt_units(const GptConfig& cfg, int tp, const GptStagePart& part) {
  std::vector<UnitSpec> all = gpt_units(cfg, tp), units;
  if (part.chunks.empty()) return all;
  if (part.first) units.push_back(all[static_cast<std::size_t>(embeddings_unit())]);
  for (const LayerRange& r : part.chunks)
    for (int l = r.first; l < r.last; ++l) units.push_back(all[static_cast<std::size_t>(block_unit(l))]);
  if (part.last) units.push_back(all[static_cast<std::size_t>(final_norm_unit(cfg))]);
  if (part.last && !cfg.tied) units.push_back(all[static_cast<std::size_t>(final_norm_unit(cfg)) + 1]);
  if (part.holds_tied_copy()) {
    units.push_back(all[static_cast<std::size_t>(embeddings_unit())]);
    units.back().name = kTiedHeadUnit;
  }
  return units;
}

int embeddings_unit() { return 0; }
int block_unit(int layer) { return 1 + layer; }
int final_norm_unit(const GptConfig& cfg) { return 1 + cfg.layers; }

namespace {
double unit_uniform(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
}  // namespace

void spec_init(const GptConfig& cfg, const ParamSlot& slot, std::size_t begin, std::size_t count, float* out,
               std::uint64_t seed) {
  const std::string& n = slot.name;
  auto ends = [&](const char* s) {
    return n.size() >= std::strlen(s) && n.compare(n.size() - std::strlen(s), std::string::npos, s) == 0;
  };
  if (ends(".bias")) {
    std::fill(out, out + count, 0.0f);
    return;
  }
  if (ends("ln_1.weight") || ends("ln_2.weight") || n == "ln_f.weight" || ends("norm.weight")) {
    std::fill(out, out + count, 1.0f);
    return;
  }
  // The products into the residual stream (GPT-2's c_proj, Llama's wo and w2) are scaled down by sqrt(2 layers).
  double sigma = 0.02;
  if (ends("c_proj.weight") || ends("attention.wo.weight") || ends("feed_forward.w2.weight"))
    sigma = 0.02 / std::sqrt(2.0 * cfg.layers);
  std::uint64_t h = fnv1a(n);
  for (std::size_t k = 0; k < count; ++k) {
    // Box-Muller on two counter-based uniforms: element (begin + k) of this parameter, for this seed.
    std::uint64_t idx = begin + k;
    double u1 = unit_uniform(splitmix64(h ^ splitmix64(seed ^ splitmix64(2 * idx))));
    double u2 = unit_uniform(splitmix64(h ^ splitmix64(seed ^ splitmix64(2 * idx + 1))));
    out[k] = static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
}

}  // namespace strata::gpt
