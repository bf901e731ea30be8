// The host AdamWKernel: adamw_update in stream order.
#include "runtime/optim/adamw_kernel.h"

namespace strata {
namespace {

class HostAdamWKernel : public AdamWKernel {
 public:
  void update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg, double lr,
              std::int64_t t, bool decay, float* nonfinite, Stream& stream) override {
    stream.enqueue_host([=] {
      if (adamw_update(p, g, m, v, n, cfg, lr, t, decay) > 0 && nonfinite) *nonfinite = 1.0f;
    });
  }
};

}  // namespace

std::unique_ptr<AdamWKernel> create_host_adamw_kernel() { return std::make_unique<HostAdamWKernel>(); }

}  // namespace strata
