// A trainer outside Strata's tree: one unit of two parameters fitted to a target by least squares, sharded over the
// ranks, through the public header only. Prints the loss per step and "consumer: ok" when it fell.
#include <strata/strata.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    strata::DeviceMesh mesh(rt, strata::MeshDims{});  // every rank shards the state
    std::vector<strata::UnitSpec> units = {{"fit", {{"w", {37}}, {"b", {5}, /*weight_decay=*/false}}}};
    strata::ShardedModel model(mesh, units, strata::ShardingOptions{});
    strata::AdamWConfig adam;
    adam.lr = 0.3;
    adam.weight_decay = 0;
    strata::ShardedAdamW optimizer(model, adam);
    model.init([](const strata::ParamSlot&, std::size_t, std::size_t count, float* out) {
      std::memset(out, 0, count * 4);
    });
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      // loss = mean over elements of (p - target)^2 / 2, target[i] = 1 + i / 10; the gradient is (p - target) / n.
      const std::vector<strata::TensorView>& p = model.begin_forward(0);
      double loss = 0;
      std::size_t n = 0;
      for (const strata::TensorView& v : p) n += v.numel();
      for (const strata::TensorView& v : p)
        for (std::size_t i = 0; i < v.numel(); ++i) loss += 0.5 * std::pow(v.as<float>()[i] - (1.0f + 0.1f * i), 2);
      loss /= static_cast<double>(n);
      model.end_forward(0);
      strata::BackwardViews views = model.begin_backward(0);
      for (std::size_t k = 0; k < views.grads.size(); ++k)
        for (std::size_t i = 0; i < views.grads[k].numel(); ++i)
          views.grads[k].as<float>()[i] +=
              (views.params[k].as<float>()[i] - (1.0f + 0.1f * static_cast<float>(i))) / static_cast<float>(n);
      model.end_backward(0);
      optimizer.step(adam.lr);
      const double mean = strata::sum_over_ranks(rt.world(), loss) / rt.world_size();
      if (step == 0) first = mean;
      last = mean;
      if (rt.rank() == 0) std::printf("step %d loss %.6f\n", step, mean);
    }
    STRATA_CHECK(last < 0.1 * first, "the loss did not fall: {} -> {}", first, last);
    if (rt.rank() == 0) std::printf("consumer: ok, %d ranks, loss %.6f -> %.6f\n", rt.world_size(), first, last);
    return 0;
  });
}
