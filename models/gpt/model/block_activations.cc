// BlockWidths of a model, and plan_positions: what each position of a rank's chunks keeps under its blocks' recomputation kinds.
#include "models/gpt/model/block_activations.h"

namespace strata::gpt {

BlockWidths BlockWidths::of(const GptConfig& cfg, std::uint64_t N, std::uint64_t Nl, int tp, std::uint64_t T) {
  const std::uint64_t P = static_cast<std::uint64_t>(tp);
  BlockWidths w;
  w.N = N;
  w.Nl = Nl;
  w.C = static_cast<std::uint64_t>(cfg.embd);
  w.qkv = static_cast<std::uint64_t>(cfg.q_width()) / P + 2 * static_cast<std::uint64_t>(cfg.kv_local(tp) * cfg.hd());
  w.att = static_cast<std::uint64_t>(cfg.q_width()) / P;
  const std::uint64_t mlp = static_cast<std::uint64_t>(cfg.mlp_width()) / P;
  w.up = cfg.llama() ? 2 * mlp : mlp;
  w.act = mlp;
  w.Hl = static_cast<std::uint64_t>(cfg.heads) / P;
  w.T = T;
  w.norm_mean = !cfg.llama();
  return w;
}

PositionPlan plan_positions(const std::vector<LayerRange>& chunks, const RecomputePolicy& policy) {
  PositionPlan p;
  for (const LayerRange& r : chunks) {
    for (int l = r.first; l < r.last; ++l) {
      const std::size_t local = static_cast<std::size_t>(l - r.first);
      if (p.keep.size() <= local) {
        p.keep.resize(local + 1, 0);
        p.offloads.resize(local + 1, false);
      }
      const BlockRecompute kind = policy.at(l);
      p.keep[local] |= kAllActs & ~dropped_by(kind);
      if (kind == BlockRecompute::kOffload) p.offloads[local] = true;
      else p.rebuilt |= dropped_by(kind);
    }
  }
  return p;
}

}  // namespace strata::gpt
