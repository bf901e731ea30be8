// AdamW (torch.optim.AdamW semantics) on f32 ranges, and the warmup + cosine learning-rate schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  void validate() const;  // throws kInvalidArgument naming the bad value
};

// One AdamW update of n elements at step t (t >= 1):
//   p = p * (1 - lr*wd)            (only when `decay`)
//   m = beta1*m + (1-beta1)*g ; v = beta2*v + (1-beta2)*g*g
//   p = p - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps),  bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (in double)
// The scalars are computed once in double and applied in f32, as torch does. Vectorised (AVX-512 / AVX2 chosen at
// load time) and, from 32K elements, split over the OpenMP threads; results are bitwise those of the plain scalar
// loop at any thread count (docs/benchmarks.md has its speed). Returns how many updated elements of p are not finite
// (NaN or inf), counted as they are written: the optimizer's check of the weights costs no extra pass.
std::size_t adamw_update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg,
                         double lr, std::int64_t t, bool decay);

// The update's scalars for step t, computed once in double and applied in f32 (as torch does); CUDA kernels take
// them as they are so that both backends apply the same f32 constants.
struct AdamWScalars {
  float shrink, b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_sqrt, eps;
};
AdamWScalars adamw_scalars(const AdamWConfig& cfg, double lr, std::int64_t t, bool decay);

// The same update as a plain loop, one element at a time, built without vectorisation: the reference that
// adamw_update equals bit for bit (tests/runtime/optim/test_adamw.cc) and the baseline bench_adamw measures it against.
void adamw_update_scalar(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg,
                         double lr, std::int64_t t, bool decay);

// How the learning rate leaves max_lr after the warmup (--lr-schedule): not at all; along half a cosine or a line to
// min_lr at total_steps; or warmup-stable-decay (torchtitan's and Megatron-LM's WSD): max_lr until the last
// decay_fraction of the steps after the warmup, then a line to min_lr at total_steps.
enum class LrDecay { kConstant, kCosine, kLinear, kWsd };
// "constant", "cosine", "linear", "wsd".
const char* lr_decay_name(LrDecay decay);
// The inverse of lr_decay_name; kInvalidArgument naming the allowed names otherwise.
LrDecay parse_lr_decay(const std::string& name);

// Linear warmup over warmup_steps (step s takes max_lr * (s + 1) / warmup_steps, reaching max_lr at the last one), then
// `decay` from max_lr to min_lr, reached at step total_steps (min_lr after it). Every value in closed form of the step.
struct LrSchedule {
  double max_lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;  // 0: constant max_lr after warmup
  LrDecay decay = LrDecay::kCosine;
  double decay_fraction = 0.2;  // kWsd: the share of the steps after the warmup that decay, in (0, 1]
  double at(std::int64_t step) const;  // step counts from 0
  // kInvalidArgument naming the value: negative rates or steps, min_lr above max_lr, a decay fraction outside (0, 1].
  void validate() const;
};

}  // namespace strata
