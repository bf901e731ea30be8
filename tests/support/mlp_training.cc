// reference_training and sharded_training: see mlp_training.h.
#include "tests/support/mlp_training.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "collectives/rank_values.h"
#include "runtime/bootstrap/runtime.h"
#include "runtime/parallel/device_mesh.h"
#include "tests/support/compare.h"
#include "tests/support/test_support.h"

namespace strata::test {

mlp::MlpConfig small_config() { return mlp::MlpConfig{7, 13, 3, 2}; }

AdamWConfig test_adamw() {
  AdamWConfig c;
  c.lr = 1e-2;
  c.weight_decay = 0.1;
  return c;
}

History reference_training(const mlp::MlpConfig& cfg, int steps, int micro_batches, double clip) {
  auto units = mlp::mlp_units(cfg);
  std::map<std::string, std::vector<float>> p, m, v;
  std::map<std::string, const SlotSpec*> spec;
  for (const UnitSpec& u : units)
    for (const SlotSpec& s : u.slots) {
      ParamSlot slot{s.name, s.shape, shape_numel(s.shape), 0, s.weight_decay, s.trainable};
      p[s.name].resize(slot.numel);
      mlp::mlp_init(slot, 0, slot.numel, p[s.name].data(), kSeed);
      m[s.name].assign(slot.numel, 0.0f);
      v[s.name].assign(slot.numel, 0.0f);
      spec[s.name] = &s;
    }
  History h;
  AdamWConfig cfg_adam = test_adamw();
  for (int step = 0; step < steps; ++step) {
    std::map<std::string, std::vector<float>> g;
    for (auto& [name, values] : p) g[name].assign(values.size(), 0.0f);
    double loss = 0;
    for (int a = 0; a < micro_batches; ++a) {
      auto batch = mlp::make_batch(cfg, static_cast<std::uint64_t>((step * micro_batches + a) * kGlobalRows),
                                   kGlobalRows, kSeed);
      mlp::Activations acts(runtime().device());
      std::vector<mlp::LayerParams> lp(static_cast<std::size_t>(cfg.num_layers()));
      std::vector<float> x = batch.x;
      for (int i = 0; i < cfg.num_layers(); ++i) {
        std::string u = "layer" + std::to_string(i);
        lp[static_cast<std::size_t>(i)].weight = p[u + ".weight"];
        lp[static_cast<std::size_t>(i)].bias = p[u + ".bias"];
        if (i == 0) lp[0].input_scale = p[u + ".input_scale"];
        x = mlp::layer_forward(cfg, i, lp[static_cast<std::size_t>(i)], x, batch.rows, acts);
      }
      std::vector<float> dy;
      loss += mlp::mse_loss(x, batch.t, dy, 1.0f / static_cast<float>(micro_batches)) / micro_batches;
      for (int i = cfg.num_layers() - 1; i >= 0; --i) {
        std::string u = "layer" + std::to_string(i);
        std::vector<float> dw, db;
        dy = mlp::layer_backward(cfg, i, lp[static_cast<std::size_t>(i)], acts, dy, batch.rows, dw, db);
        for (std::size_t k = 0; k < dw.size(); ++k) g[u + ".weight"][k] += dw[k];
        for (std::size_t k = 0; k < db.size(); ++k) g[u + ".bias"][k] += db[k];
      }
    }
    double sumsq = 0;
    for (auto& [name, grad] : g)
      if (spec[name]->trainable)
        for (float x : grad) sumsq += static_cast<double>(x) * x;
    double norm = std::sqrt(sumsq);
    h.losses.push_back(loss);
    h.norms.push_back(norm);
    float coef = clip > 0 ? static_cast<float>(std::min(1.0, clip / (norm + 1e-6))) : 1.0f;
    for (auto& [name, grad] : g) {
      if (!spec[name]->trainable) continue;
      for (float& x : grad) x *= coef;
      adamw_update(p[name].data(), grad.data(), m[name].data(), v[name].data(), grad.size(), cfg_adam, cfg_adam.lr,
                   step + 1, spec[name]->weight_decay);
    }
  }
  h.params = p;
  return h;
}

std::string TrainSetup::describe() const {
  return fmt::format("{}; dp_replicate {}, grad_clip {}, {} micro-batch(es){}", sharding.describe(), dp_replicate,
                     grad_clip, micro_batches, no_sync ? ", no-sync" : "");
}

StepResult train_step(ShardedModel& model, ShardedAdamW& optimizer, int step, int micro_batches, bool no_sync) {
  Runtime& rt = runtime();
  const mlp::MlpConfig cfg = small_config();
  const int rows = kGlobalRows / rt.world_size();
  for (int a = 0; a < micro_batches; ++a) {
    const bool last = a == micro_batches - 1;
    model.set_requires_gradient_sync(!no_sync || last);
    model.set_is_last_backward(last);
    std::uint64_t first = static_cast<std::uint64_t>(((step * micro_batches + a) * rt.world_size() + rt.rank()) * rows);
    mlp::forward_backward(model, cfg, mlp::make_batch(cfg, first, rows, kSeed),
                          optimizer.loss_scale() / static_cast<float>(micro_batches));
  }
  return optimizer.step(test_adamw().lr);
}

History sharded_training(const mlp::MlpConfig& cfg, const TrainSetup& setup, int steps) {
  Runtime& rt = runtime();
  const int world = rt.world_size(), rows = kGlobalRows / world, mb = setup.micro_batches;
  DeviceMesh mesh(rt, MeshDims{1, setup.dp_replicate, -1, 1});
  ShardedModel model(mesh, mlp::mlp_units(cfg), setup.sharding);
  OptimizerOptions o;
  o.grad_clip = setup.grad_clip;
  ShardedAdamW optimizer(model, test_adamw(), o);
  model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
  History h;
  for (int step = 0; step < steps; ++step) {
    double loss = 0;
    for (int a = 0; a < mb; ++a) {
      const bool last = a == mb - 1;
      model.set_requires_gradient_sync(!setup.no_sync || last);
      model.set_is_last_backward(last);
      std::uint64_t first = static_cast<std::uint64_t>(((step * mb + a) * world + rt.rank()) * rows);
      auto batch = mlp::make_batch(cfg, first, rows, kSeed);
      loss += mlp::forward_backward(model, cfg, batch, optimizer.loss_scale() / static_cast<float>(mb)) / mb;
    }
    StepResult r = optimizer.step(test_adamw().lr);
    EXPECT_FALSE(r.skipped);
    h.losses.push_back(sum_over_ranks(rt.world(), loss) / world);
    h.norms.push_back(r.grad_norm);
  }
  for (int i = 0; i < model.num_units(); ++i) {
    std::vector<float> full = model.parameters().gather_master(i);
    for (const ParamSlot& s : model.layout(i).slots())
      h.params[s.name] = std::vector<float>(full.begin() + static_cast<std::ptrdiff_t>(s.offset),
                                            full.begin() + static_cast<std::ptrdiff_t>(s.offset + s.numel));
  }
  return h;
}

double max_rel_error(const History& got, const History& want, double floor) {
  double worst = 0;
  for (const auto& [name, ref] : want.params) {
    auto it = got.params.find(name);
    if (it == got.params.end() || it->second.size() != ref.size()) {
      ADD_FAILURE() << "parameter " << name << " missing or of the wrong size";
      return 1e30;
    }
    worst = worse(worst, max_abs_over_scale(it->second, ref, floor));
  }
  return worst;
}

}  // namespace strata::test
