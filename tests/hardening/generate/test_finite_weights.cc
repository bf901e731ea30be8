// check_finite_weights: every element read exactly once over the ranks, and the first non-finite value in the model's
// order named on every rank, wherever the ranks' runs split the model (np 1, 2, 3).
#include "models/gpt/inference/finite_weights.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "collectives/rank_values.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

const GptConfig kModel{2, 2, 8, 16, 8};  // layers, heads, embd, vocab, ctx

// Reads a finite function of (name, element), with `bad` values at their places, and counts the elements read.
struct Source {
  std::map<std::pair<std::string, std::size_t>, float> bad;
  std::size_t read = 0;
  WeightReader reader() {
    return [this](const std::string& name, std::size_t begin, std::size_t count, float* out) {
      for (std::size_t i = 0; i < count; ++i) {
        const auto it = bad.find({name, begin + i});
        out[i] = it != bad.end() ? it->second : 0.25f * static_cast<float>((begin + i) % 7) - 0.5f;
      }
      read += count;
    };
  }
};

std::size_t model_numel() {
  std::size_t n = 0;
  for (const UnitSpec& u : gpt_units(kModel, 1))
    for (const SlotSpec& s : u.slots) n += shape_numel(s.shape);
  return n;
}

// The message every rank throws for `src`, or "" when none.
std::string refusal(Source& src) {
  try {
    check_finite_weights(kModel, src.reader(), "model.safetensors", test::runtime().world());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNonFinite);
    return e.what();
  }
  return {};
}

TEST(FiniteWeights, FiniteWeightsPassAndEachElementIsReadOnce) {
  Source src;
  EXPECT_EQ(refusal(src), "");
  EXPECT_EQ(sum_over_ranks(test::runtime().world(), static_cast<double>(src.read)), static_cast<double>(model_numel()));
}

TEST(FiniteWeights, TheFirstInTheModelsOrderIsNamedOnEveryRank) {
  const float inf = std::numeric_limits<float>::infinity();
  Source src;
  src.bad[{"ln_f.bias", 7}] = -inf;  // the model's last element: the last rank's run
  src.bad[{"h.1.mlp.c_proj.weight", 30}] = std::nanf("");
  src.bad[{"h.1.mlp.c_proj.weight", 31}] = inf;
  const std::string m = refusal(src);
  EXPECT_NE(m.find("model.safetensors: tensor 'h.1.mlp.c_proj.weight' holds NaN at element 30"), std::string::npos)
      << m;
  Source last;
  last.bad[{"ln_f.bias", 7}] = -inf;
  const std::string n = refusal(last);
  EXPECT_NE(n.find("tensor 'ln_f.bias' holds -inf at element 7"), std::string::npos) << n;
  Source first;
  first.bad[{"wte.weight", 0}] = inf;
  const std::string f = refusal(first);
  EXPECT_NE(f.find("tensor 'wte.weight' holds inf at element 0"), std::string::npos) << f;
}

}  // namespace
}  // namespace strata::gpt
