// AdamW and schedule tests: torch.optim.AdamW's update, worked by hand in double for two steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/loss_scaler.h"

namespace strata {
namespace {

TEST(AdamW, MatchesTheTorchFormulaForTwoSteps) {
  AdamWConfig c;
  c.lr = 0.1;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.5;
  float p[2] = {1.0f, -2.0f}, m[2] = {0, 0}, v[2] = {0, 0};
  const float g1[2] = {0.5f, -0.25f}, g2[2] = {-1.0f, 0.125f};
  double ep[2] = {1.0, -2.0}, em[2] = {0, 0}, ev[2] = {0, 0};
  for (int t = 1; t <= 2; ++t) {
    const float* g = t == 1 ? g1 : g2;
    adamw_update(p, g, m, v, 2, c, c.lr, t, /*decay=*/true);
    for (int i = 0; i < 2; ++i) {
      ep[i] *= 1 - c.lr * c.weight_decay;
      em[i] = c.beta1 * em[i] + (1 - c.beta1) * g[i];
      ev[i] = c.beta2 * ev[i] + (1 - c.beta2) * g[i] * g[i];
      double bc1 = 1 - std::pow(c.beta1, t), bc2 = 1 - std::pow(c.beta2, t);
      ep[i] -= c.lr / bc1 * em[i] / (std::sqrt(ev[i]) / std::sqrt(bc2) + c.eps);
      EXPECT_NEAR(p[i], ep[i], 1e-6 * std::abs(ep[i])) << "step " << t << " element " << i;
      EXPECT_NEAR(m[i], em[i], 1e-7);
      EXPECT_NEAR(v[i], ev[i], 1e-7);
    }
  }
}

TEST(AdamW, NoDecayLeavesTheShrinkOut) {
  AdamWConfig c;
  c.weight_decay = 0.5;
  float p = 1.0f, m = 0, v = 0, g = 0;
  adamw_update(&p, &g, &m, &v, 1, c, 0.1, 1, /*decay=*/false);
  EXPECT_EQ(p, 1.0f);  // zero gradient, no decay: unchanged
  adamw_update(&p, &g, &m, &v, 1, c, 0.1, 2, /*decay=*/true);
  EXPECT_FLOAT_EQ(p, 0.95f);
}

TEST(AdamW, VectorisedAndThreadedEqualsTheScalarLoopBitwise) {
  AdamWConfig c;
  c.weight_decay = 0.1;
  // Sizes around the vector widths, the 16-element chunk alignment and the 32K threading threshold.
  for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{17}, std::size_t{1000}, std::size_t{32767},
                        std::size_t{32768}, std::size_t{100003}}) {
    std::vector<float> p(n), g(n), m(n), v(n);
    std::uint32_t state = 12345;
    auto next = [&] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(static_cast<std::int32_t>(state >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
    };
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = next();
      g[i] = next() * 1e-2f;
      m[i] = next() * 1e-3f;
      v[i] = std::abs(next()) * 1e-5f;
    }
    auto p2 = p, m2 = m, v2 = v;
    for (int t = 1; t <= 3; ++t) {
      adamw_update(p.data(), g.data(), m.data(), v.data(), n, c, 1e-3, t, t != 2);
      adamw_update_scalar(p2.data(), g.data(), m2.data(), v2.data(), n, c, 1e-3, t, t != 2);
    }
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&p[i], &p2[i], 4), 0) << "n " << n << " element " << i << ": " << p[i] << " vs " << p2[i];
      ASSERT_EQ(std::memcmp(&m[i], &m2[i], 4), 0) << "n " << n << " element " << i;
      ASSERT_EQ(std::memcmp(&v[i], &v2[i], 4), 0) << "n " << n << " element " << i;
    }
  }
}

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);
  LrSchedule constant{0.5, 0, 0, 0};
  EXPECT_DOUBLE_EQ(constant.at(1000), 0.5);
}

// Each decay against values worked by hand: peak 1, floor 0.1, 10 warmup steps, the floor at step 110 (100 steps of
// decay); wsd decays over the last 0.2 x 100 = 20 of them, from step 90.
TEST(LrSchedule, EachDecayAgainstItsClosedForm) {
  auto schedule = [](LrDecay decay) {
    LrSchedule s{1.0, 0.1, 10, 110};
    s.decay = decay;
    s.decay_fraction = 0.2;
    s.validate();
    return s;
  };
  for (LrDecay d : {LrDecay::kConstant, LrDecay::kCosine, LrDecay::kLinear, LrDecay::kWsd}) {
    SCOPED_TRACE(lr_decay_name(d));
    EXPECT_EQ(parse_lr_decay(lr_decay_name(d)), d);
    const LrSchedule s = schedule(d);
    EXPECT_DOUBLE_EQ(s.at(0), 0.1);  // the warmup is every schedule's
    EXPECT_DOUBLE_EQ(s.at(4), 0.5);
    EXPECT_DOUBLE_EQ(s.at(9), 1.0);
    EXPECT_DOUBLE_EQ(s.at(10), 1.0);
    EXPECT_DOUBLE_EQ(s.at(500), d == LrDecay::kConstant ? 1.0 : 0.1);
  }
  const LrSchedule cosine = schedule(LrDecay::kCosine), linear = schedule(LrDecay::kLinear),
                   wsd = schedule(LrDecay::kWsd);
  EXPECT_NEAR(cosine.at(35), 0.1 + 0.45 * (1 + std::cos(M_PI / 4)), 1e-15);  // a quarter of the way
  EXPECT_NEAR(cosine.at(85), 0.1 + 0.45 * (1 + std::cos(3 * M_PI / 4)), 1e-15);
  EXPECT_NEAR(linear.at(35), 0.775, 1e-15);
  EXPECT_NEAR(linear.at(60), 0.55, 1e-15);
  EXPECT_NEAR(linear.at(109), 0.109, 1e-15);
  EXPECT_DOUBLE_EQ(wsd.at(89), 1.0);  // stable
  EXPECT_DOUBLE_EQ(wsd.at(90), 1.0);  // the decay's first step
  EXPECT_NEAR(wsd.at(95), 0.775, 1e-15);
  EXPECT_NEAR(wsd.at(100), 0.55, 1e-15);
  EXPECT_NEAR(wsd.at(109), 0.145, 1e-15);
  EXPECT_DOUBLE_EQ(wsd.at(110), 0.1);
  // A run shorter than its warmup never decays; wsd's decay is at least one step.
  LrSchedule short_run = schedule(LrDecay::kLinear);
  short_run.total_steps = 5;
  EXPECT_DOUBLE_EQ(short_run.at(7), 0.8);
  LrSchedule tiny = schedule(LrDecay::kWsd);
  tiny.decay_fraction = 0.001;
  EXPECT_DOUBLE_EQ(tiny.at(108), 1.0);
  EXPECT_DOUBLE_EQ(tiny.at(109), 1.0);
  EXPECT_DOUBLE_EQ(tiny.at(110), 0.1);
  // Bad values, named.
  LrSchedule bad = schedule(LrDecay::kWsd);
  bad.decay_fraction = 0;
  EXPECT_THROW(bad.validate(), Error);
  bad = schedule(LrDecay::kCosine);
  bad.min_lr = 2.0;
  EXPECT_THROW(bad.validate(), Error);
  EXPECT_THROW(parse_lr_decay("step"), Error);
}

TEST(LossScaler, HalvesOnOverflowAndGrowsAfterAWindow) {
  LossScaler s(true, 1024.0f, 2);
  s.update(true);
  EXPECT_EQ(s.scale(), 512.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 512.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0f);
  LossScaler off(false, 1024.0f, 2);
  EXPECT_EQ(off.scale(), 1.0f);
}

}  // namespace
}  // namespace strata
