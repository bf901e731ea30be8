// plan_positions: what each position of a rank's chunks keeps under its blocks' recomputation kinds.
#include "models/gpt/model/block_activations.h"

namespace strata::gpt {

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
