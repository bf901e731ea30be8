// RecomputePolicy: parsing, the kind of each block, and the texts that name a policy.
#include "runtime/memory/recompute_policy.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace strata {

const char* block_recompute_name(BlockRecompute kind) {
  switch (kind) {
    case BlockRecompute::kNone: return "none";
    case BlockRecompute::kMlp: return "mlp";
    case BlockRecompute::kAttention: return "attention";
    case BlockRecompute::kFull: return "full";
    case BlockRecompute::kOffload: return "offload";
  }
  return "?";
}

std::vector<BlockRecompute> every_block_recompute() {
  std::vector<BlockRecompute> kinds;
  for (int k = 0; k < kNumBlockRecompute; ++k) kinds.push_back(static_cast<BlockRecompute>(k));
  return kinds;
}

BlockRecompute parse_block_recompute(const std::string& text, const char* flag) {
  for (BlockRecompute kind : every_block_recompute())
    if (text == block_recompute_name(kind)) return kind;
  STRATA_THROW(ErrorCode::kInvalidArgument,
               "{} {}: a block's recomputation is none, mlp (the GELU), attention (the attention core), full or "
               "offload (its activations in host memory)", flag, text.empty() ? "''" : text);
}

RecomputePolicy RecomputePolicy::of(std::vector<BlockRecompute> layers) {
  RecomputePolicy p;
  p.per_layer = std::move(layers);
  return p;
}

RecomputePolicy RecomputePolicy::parse(const std::string& text, int every) {
  STRATA_CHECK(every >= 1, "--recompute-every {} must be at least 1", every);
  RecomputePolicy p;
  p.every = every;
  if (text == "auto") {
    STRATA_CHECK(every == 1, "--recompute auto chooses every block's kind: drop --recompute-every {}", every);
    p.automatic = true;
    return p;
  }
  if (text.find(',') == std::string::npos) {
    p.kind = parse_block_recompute(text);
    return p;
  }
  STRATA_CHECK(every == 1, "--recompute {} names every block's kind: drop --recompute-every {}", text, every);
  for (std::size_t at = 0;;) {  // every item, the empty ones too ("full,,none", "full,")
    const std::size_t comma = text.find(',', at);
    p.per_layer.push_back(parse_block_recompute(text.substr(at, comma == std::string::npos ? comma : comma - at)));
    if (comma == std::string::npos) return p;
    at = comma + 1;
  }
}

BlockRecompute RecomputePolicy::at(int layer) const {
  if (!per_layer.empty()) {
    STRATA_CHECK(layer >= 0 && layer < static_cast<int>(per_layer.size()),
                 "block {} has no entry in the --recompute list of {}", layer, per_layer.size());
    return per_layer[static_cast<std::size_t>(layer)];
  }
  return (layer + 1) % every == 0 ? kind : BlockRecompute::kNone;
}

bool RecomputePolicy::any() const {
  if (automatic) return true;
  if (!per_layer.empty())
    return std::any_of(per_layer.begin(), per_layer.end(), [](BlockRecompute k) { return k != BlockRecompute::kNone; });
  return kind != BlockRecompute::kNone;
}

int RecomputePolicy::count(BlockRecompute k, int layers) const {
  int n = 0;
  for (int l = 0; l < layers; ++l) n += at(l) == k ? 1 : 0;
  return n;
}

void RecomputePolicy::validate(int layers) const {
  STRATA_CHECK(every >= 1, "--recompute-every {} must be at least 1", every);
  STRATA_CHECK(per_layer.empty() || static_cast<int>(per_layer.size()) == layers,
               "--recompute lists {} blocks; the model has {} (one kind per block)", per_layer.size(), layers);
}

std::string RecomputePolicy::flags(int layers) const {
  if (automatic && per_layer.empty()) return "auto";
  if (per_layer.empty())
    return every == 1 ? block_recompute_name(kind)
                      : fmt::format("{} --recompute-every {}", block_recompute_name(kind), every);
  if (layers >= 1 && count(at(0), layers) == layers) return block_recompute_name(at(0));  // one kind for all
  std::string out;
  for (int l = 0; l < layers; ++l) out += fmt::format("{}{}", l ? "," : "", block_recompute_name(at(l)));
  return out;
}

std::string RecomputePolicy::describe(int layers) const {
  if (automatic && per_layer.empty()) return "auto (not chosen yet)";
  if (per_layer.empty() && every > 1 && kind != BlockRecompute::kNone) {
    const char* suffix = every == 2 ? "nd" : every == 3 ? "rd" : "th";
    return fmt::format("{} on every {}{} block", block_recompute_name(kind), every, suffix);
  }
  std::string out;
  int kinds = 0;
  const std::vector<BlockRecompute> all = every_block_recompute();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const BlockRecompute kind_k = *it;
    const int n = count(kind_k, layers);
    if (n == 0) continue;
    ++kinds;
    out += fmt::format("{}{} x {}", out.empty() ? "" : ", ", n, block_recompute_name(kind_k));
  }
  if (kinds == 1) return per_layer.empty() ? block_recompute_name(kind) : block_recompute_name(at(0));
  return out;
}

RecomputePolicy choose_recompute(int layers, const std::vector<std::vector<int>>& stages,
                                 const std::vector<BlockRecompute>& kinds, const RecomputeTrial& trial,
                                 int* failed_stage) {
  *failed_stage = -1;
  std::vector<BlockRecompute> chosen(static_cast<std::size_t>(layers), BlockRecompute::kNone);
  auto better = [](const RecomputeCost& a, const RecomputeCost& b) {
    if (a.flops != b.flops) return a.flops < b.flops;
    if (a.offload_bytes != b.offload_bytes) return a.offload_bytes < b.offload_bytes;
    if (a.elementwise != b.elementwise) return a.elementwise < b.elementwise;
    return a.memory < b.memory;
  };
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::vector<int>& blocks = stages[s];
    std::optional<RecomputeCost> best;
    std::vector<BlockRecompute> best_layers;
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      for (std::size_t j = i; j < kinds.size(); ++j) {
        // k blocks of kinds[i] first, the rest kinds[j] (i == j: one kind for all, tried once).
        const std::size_t n = blocks.size();
        for (std::size_t k = (i == j ? n : 0); k <= n; ++k) {
          std::vector<BlockRecompute> candidate = chosen;
          for (std::size_t b = 0; b < n; ++b)
            candidate[static_cast<std::size_t>(blocks[b])] = b < k ? kinds[i] : kinds[j];
          RecomputePolicy p = RecomputePolicy::of(candidate);
          p.automatic = true;
          const std::optional<RecomputeCost> cost = trial(p, static_cast<int>(s));
          if (cost && (!best || better(*cost, *best))) {
            best = cost;
            best_layers = std::move(candidate);
          }
        }
      }
    }
    if (!best) {
      *failed_stage = static_cast<int>(s);
      return {};
    }
    chosen = std::move(best_layers);
  }
  RecomputePolicy p = RecomputePolicy::of(chosen);
  p.automatic = true;
  return p;
}

}  // namespace strata
