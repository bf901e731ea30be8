// A trainer outside Strata's tree, through the public header only: one unit of two parameters fitted to a target by
// least squares, sharded over the ranks; the same fit with an optimizer of its own (heavy-ball momentum, an
// OptimizerState), checkpointed half way through the library's Checkpointer and resumed by a second model and
// optimizer, which ends bitwise where the uninterrupted run ends; its memory predicted (predict_state_memory from its
// units) and measured by the ledger; then a two-layer network split over a tensor-parallel group of every rank
// (a column-parallel layer, tanh, a row-parallel layer), once with its own kernels and once with the installed kernel
// table (make_kernels), both fitting to the same losses; then generation over its own Decoder,
// whose weights stream through device slots (BlockStreamer). Prints the losses, the generated tokens and "consumer: ok"
// when both losses fell, the tokens are the decoder's and its fitted parameters, written as a Hugging Face model
// directory through the installed writer (<strata/hf.h>), read back: config.json by the installed config reader, the
// shards by the installed safetensors reader. Its one flag goes through the installed CLI11 validators.
#include <strata/flag_checks.h>
#include <strata/hf.h>
#include <strata/strata.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

namespace {

// The consumer's kernels: out = inp @ weight (+ bias), as dot products over a column of the weight.
class DotKernels : public strata::LinearKernels {
 public:
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) override {
    std::vector<float> column(static_cast<std::size_t>(IC));
    for (int o = 0; o < OC; ++o) {
      for (int j = 0; j < IC; ++j) column[j] = weight[j * OC + o];
      for (int n = 0; n < N; ++n)
        out[n * OC + o] = std::inner_product(column.begin(), column.end(), inp + n * IC, bias ? bias[o] : 0.0f);
    }
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override {
    for (int o = 0; o < OC; ++o)
      for (int n = 0; n < N; ++n) {
        const float g = dout[n * OC + o];
        if (dbias) dbias[o] += g;
        for (int j = 0; j < IC; ++j) {
          dweight[j * OC + o] += g * inp[n * IC + j];
          if (dinp) dinp[n * IC + j] += g * weight[j * OC + o];
        }
      }
  }
  void add_bias(float* out, const float* bias, int N, int C) override {
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) out[n * C + c] += bias[c];
  }
  void zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }
};

// y = tanh(x @ W1 + b1) @ W2 + b2 over `mesh`'s tp group (W1 column-parallel, W2 row-parallel), fitted by AdamW to a
// fixed target, its products by `k`. Returns the first and the last loss.
std::pair<double, double> fit_tensor_parallel(strata::Runtime& rt, strata::DeviceMesh& mesh, strata::LinearKernels& k) {
  constexpr int kRows = 8, kIn = 4, kHidden = 8, kOut = 2;
  strata::TensorParallel tp(rt.device(), &mesh.tp(), false, kRows, 1, kHidden);
  strata::ColumnParallelLinear first(tp, k, kIn, kHidden);
  strata::RowParallelLinear second(tp, k, kHidden, kOut);
  auto slot = [&](std::string name, strata::TpSplit split, bool decay = true) {
    strata::SlotSpec s{name, {}, decay, true};
    s.shape = split.replicated() ? std::vector<std::int64_t>{kOut} : split.local_shape(tp.size());
    s.tp = split;
    return s;
  };
  std::vector<strata::UnitSpec> units = {{"first", {slot("w1", first.weight_split()), slot("b1", first.bias_split())}},
                                         {"second", {slot("w2", second.weight_split()), slot("b2", {}, false)}}};
  strata::ShardedModel model(mesh, units, strata::ShardingOptions{});
  model.init(strata::init_by_global_index(mesh, [](const strata::ParamSlot& s, std::size_t g, std::size_t n, float* o) {
    for (std::size_t i = 0; i < n; ++i) o[i] = 0.4f * std::sin(1.7f * static_cast<float>(g + i) + s.name[1]);
  }));
  strata::AdamWConfig adam;
  adam.lr = 0.05;
  adam.weight_decay = 0;
  strata::OptimizerOptions options;
  options.norm_groups = strata::model_parallel_norm_groups(mesh);
  options.counted = strata::counted_once(mesh);
  strata::ShardedAdamW optimizer(model, adam, options);
  std::vector<float> x(kRows * kIn), t(kRows * kOut), h(kRows * first.local_out()), y(kRows * kOut);
  for (int i = 0; i < kRows * kIn; ++i) x[i] = std::cos(0.9f * i);
  for (int i = 0; i < kRows * kOut; ++i) t[i] = 0.5f * std::sin(0.6f * i);
  double start = 0, loss = 0;
  for (int step = 0; step < 40; ++step) {
    const std::vector<strata::TensorView>& p1 = model.begin_forward(0);
    first.forward(h.data(), x.data(), nullptr, p1[0].as<float>(), p1[1].as<float>());
    model.end_forward(0);
    for (float& v : h) v = std::tanh(v);
    const std::vector<strata::TensorView>& p2 = model.begin_forward(1);
    second.forward(y.data(), nullptr, h.data(), p2[0].as<float>(), p2[1].as<float>());
    model.end_forward(1);
    std::vector<float> dy(y.size()), dh(h.size()), dx(x.size());
    loss = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      loss += (y[i] - t[i]) * (y[i] - t[i]) / y.size();
      dy[i] = 2 * (y[i] - t[i]) / y.size();
    }
    if (step == 0) start = loss;
    strata::BackwardViews g2 = model.begin_backward(1);
    second.backward(dh.data(), nullptr, g2.grads[0].as<float>(), g2.grads[1].as<float>(), dy.data(), h.data(),
                    g2.params[0].as<float>());
    model.end_backward(1);
    for (std::size_t i = 0; i < h.size(); ++i) dh[i] *= 1 - h[i] * h[i];
    strata::BackwardViews g1 = model.begin_backward(0);
    first.backward(dx.data(), nullptr, g1.grads[0].as<float>(), g1.grads[1].as<float>(), dh.data(), x.data(),
                   g1.params[0].as<float>());
    model.end_backward(0);
    optimizer.step(adam.lr);
  }
  return {start, loss};
}

// Heavy-ball momentum, the consumer's own optimizer: v = mu v + g, p -= lr v on this rank's f32 shards (the CPU
// backend's host memory). Its velocity is device memory in the ledger's optimizer category, one float per shard
// element; as an OptimizerState it names it, so the library checkpoints it.
class HeavyBall : public strata::OptimizerState {
 public:
  HeavyBall(strata::ShardedModel& model, float lr, float mu) : params_(model.parameters()), lr_(lr), mu_(mu) {
    for (int u = 0; u < params_.num_units(); ++u) {
      const std::size_t bytes = params_.unit(u).numel() * 4;
      velocity_.push_back(params_.device().allocate(bytes, strata::MemCategory::kOptimState));
      std::memset(velocity_.back().data(), 0, bytes);
    }
  }
  void step() {
    params_.wait_for_grads();
    for (int u = 0; u < params_.num_units(); ++u) {
      params_.begin_update(u);
      params_.stream().synchronize();
      const strata::UnitShard shard = params_.unit(u);
      float* v = velocity_[static_cast<std::size_t>(u)].as<float>();
      for (const strata::ShardSegment& seg : shard.segments)
        for (std::size_t i = seg.shard_begin; i < seg.shard_begin + seg.length; ++i) {
          v[i] = mu_ * v[i] + shard.grad[i];
          shard.master[i] -= lr_ * v[i];
        }
      params_.end_update(u);
    }
    params_.finish_step(++steps_, true);
  }
  std::string kind() const override { return "heavy_ball"; }
  std::vector<std::string> tensor_names() const override { return {"velocity"}; }
  float* tensor_shard(std::size_t, int unit) override { return velocity_[static_cast<std::size_t>(unit)].as<float>(); }
  nlohmann::json state() const override { return {{"step", steps_}}; }
  void restore(const nlohmann::json& s) override { steps_ = s.at("step").get<std::int64_t>(); }
  std::int64_t steps_taken() const override { return steps_; }

 private:
  strata::ShardedParameters& params_;
  float lr_, mu_;
  std::vector<strata::Buffer> velocity_;
  std::int64_t steps_ = 0;
};

// One unit of two slots fitted by heavy-ball momentum to target[i] = 1 + i / 10 (loss: half the squared distance),
// steps [from, to), checkpointed in `dir` after step `save_at` (0: never), or resumed from its latest when from > 0.
// Returns the fitted parameters (on rank 0; empty elsewhere). Its state's memory is predicted from its units
// (predict_state_memory, one optimizer float per element) and held to what the ledger measures, category by category.
std::vector<float> fit_own_optimizer(strata::Runtime& rt, strata::DeviceMesh& mesh, const std::string& dir, int from,
                                     int to, int save_at) {
  strata::MemoryStats& stats = rt.device().memory_stats();
  std::array<std::size_t, strata::kNumMemCategories> before{};
  for (std::size_t c = 0; c < before.size(); ++c) before[c] = stats.current(static_cast<strata::MemCategory>(c));
  stats.reset_peaks();
  const std::vector<strata::UnitSpec> units = {{"fit", {{"w", {37}}, {"b", {5}, /*weight_decay=*/false}}}};
  strata::ShardedModel model(mesh, units, strata::ShardingOptions{});
  model.init(
      [](const strata::ParamSlot&, std::size_t, std::size_t count, float* out) { std::memset(out, 0, count * 4); });
  HeavyBall optimizer(model, 0.2f, 0.5f);
  strata::CheckpointOptions options;
  options.dir = dir;
  strata::Checkpointer checkpointer(model, optimizer, mesh, options);
  if (from > 0) {
    const nlohmann::json state = checkpointer.load();
    STRATA_CHECK(state.at("next_step") == from && optimizer.steps_taken() == from,
                 "resumed at trainer step {}, optimizer step {}, not {}", state.at("next_step").dump(),
                 optimizer.steps_taken(), from);
  }
  for (int step = from; step < to; ++step) {
    const std::vector<strata::TensorView>& p = model.begin_forward(0);
    model.end_forward(0);
    strata::BackwardViews views = model.begin_backward(0);
    for (std::size_t k = 0; k < views.grads.size(); ++k)
      for (std::size_t i = 0; i < views.grads[k].numel(); ++i)
        views.grads[k].as<float>()[i] += views.params[k].as<float>()[i] - (1.0f + 0.1f * static_cast<float>(i));
    model.end_backward(0);
    optimizer.step();
    if (step + 1 == save_at) checkpointer.save(step + 1, {{"next_step", step + 1}});
    (void)p;
  }
  std::vector<float> whole;
  const std::vector<strata::TensorView>& fitted = model.begin_forward(0);
  if (rt.rank() == 0)
    for (const strata::TensorView& v : fitted) whole.insert(whole.end(), v.as<float>(), v.as<float>() + v.numel());
  model.end_forward(0);
  // The state's categories (the communicator's staging is the world's, grown by the fit before this one; the
  // checkpoint's staging is the Checkpointer's, not the state's).
  const strata::StateMemory predicted = strata::predict_state_memory(
      units, strata::ShardingOptions{}, strata::DataParallelSizes{rt.world_size(), 1}, /*optimizer_floats=*/1);
  for (strata::MemCategory c : {strata::MemCategory::kParamShard, strata::MemCategory::kMaster,
                                strata::MemCategory::kGradShard, strata::MemCategory::kOptimState,
                                strata::MemCategory::kUnshardedParams, strata::MemCategory::kUnshardedGrads}) {
    const std::size_t i = static_cast<std::size_t>(c), measured = stats.peak(c) - before[i];
    STRATA_CHECK(predicted.device[i] == measured, "{}: predicted {} bytes, the ledger measured {}",
                 strata::mem_category_name(c), predicted.device[i], measured);
  }
  return whole;
}

// A decoder of the consumer's own: the next token is the last one plus the sum of one streamed weight block's bytes
// (each block holds its index, so blocks 0, 1 and 2 add 3 a pass), modulo the vocabulary.
class CountingDecoder : public strata::Decoder {
 public:
  explicit CountingDecoder(strata::Device& dev)
      : streamer_(dev, 8, 3, strata::WeightSource::kHost, 1,
                  [](int block, std::size_t, std::size_t bytes, void* out) { std::memset(out, block, bytes); }),
        logits_(kVocab) {}
  int vocab() const override { return kVocab; }
  int context() const override { return 16; }
  int sequences() const override { return 1; }
  int length(int) const override { return length_; }
  void reset(int) override { length_ = 0; }
  const float* prefill(int, const std::int32_t* tokens, int n, float*) override {
    length_ += n;
    return pass(tokens[n - 1]);
  }
  const float* decode(const std::vector<int>&, const std::vector<std::int32_t>& tokens) override {
    length_ += 1;
    return pass(tokens[0]);
  }
  std::uint64_t weight_bytes_read() const override { return 0; }
  std::uint64_t cache_bytes_read() const override { return 0; }
  std::uint64_t streamed_bytes_read() const override { return streamer_.bytes_streamed(); }

 private:
  static constexpr int kVocab = 11;
  const float* pass(std::int32_t last) {
    int step = 0;
    for (int b = 0; b < 3; ++b) {
      std::uint8_t bytes[8];
      std::memcpy(bytes, streamer_.acquire(b), 8);  // CPU backend: device memory is host memory
      step += bytes[0];
      streamer_.release();
    }
    std::fill(logits_.begin(), logits_.end(), 0.0f);
    logits_[static_cast<std::size_t>((last + step) % kVocab)] = 1.0f;
    return logits_.data();
  }
  strata::BlockStreamer streamer_;
  std::vector<float> logits_;
  int length_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"consumer: a sharded fit and a tp network through the installed package"};
  int steps = 30;
  app.add_option("--steps", steps, "fit steps")->check(strata::flags::integer(10, 1000));
  CLI11_PARSE(app, argc, argv);
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
    for (int step = 0; step < steps; ++step) {
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
    strata::DeviceMesh split(rt, strata::MeshDims{1, 1, -1, rt.world_size()});  // every rank in one tp group
    // The consumer's own optimizer, checkpointed through the library after step 10 of 20, then resumed there by a
    // second model and optimizer: the same parameters, bit for bit.
    const std::string ckpt = "consumer_checkpoints." + std::to_string(::getpid());
    const std::vector<float> straight = fit_own_optimizer(rt, mesh, ckpt, 0, 20, 10);
    const std::vector<float> resumed = fit_own_optimizer(rt, mesh, ckpt, 10, 20, 0);
    STRATA_CHECK(straight == resumed, "the fit resumed at step 10 ends elsewhere than the uninterrupted one");
    if (rt.rank() == 0) {
      STRATA_CHECK(std::abs(straight[36] - 4.6f) < 0.05f, "the own optimizer's fit ends at {}, not near 4.6",
                   straight[36]);
      std::filesystem::remove_all(ckpt);
    }
    // The tp network with the consumer's kernels, then with the installed kernel table's products (oneDNN on the
    // CPU): both fit, to the same losses up to the order of the sums.
    DotKernels own;
    const auto [tp_first, tp_last] = fit_tensor_parallel(rt, split, own);
    STRATA_CHECK(tp_last < 0.1 * tp_first, "the tensor-parallel loss did not fall: {} -> {}", tp_first, tp_last);
    const std::unique_ptr<strata::Kernels> installed = strata::make_kernels(rt.device());
    const auto [lib_first, lib_last] = fit_tensor_parallel(rt, split, *installed);
    STRATA_CHECK(std::abs(lib_first - tp_first) <= 1e-6 * tp_first && std::abs(lib_last - tp_last) <= 1e-4 * tp_last,
                 "the installed kernels fit from {} to {}, the consumer's from {} to {}", lib_first, lib_last, tp_first,
                 tp_last);
    CountingDecoder decoder(rt.device());
    strata::GenerateOptions options;
    options.max_new_tokens = 4;
    const strata::Generation g = strata::generate(decoder, {{2, 5}}, options);
    std::string tokens;
    for (std::int32_t t : g.tokens[0]) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
    STRATA_CHECK(tokens == "8,0,3,6" && g.decode_streamed_bytes == 3 * 24, "generated {} ({} bytes streamed)", tokens,
                 g.decode_streamed_bytes);
    // The fitted parameters as a Hugging Face model directory through the installed writer (<strata/hf.h>: config.json,
    // one tensor a shard, the index), its config.json read back by the installed reader, its tensors through the
    // installed safetensors reader as one set.
    if (rt.rank() == 0) {
      const std::vector<strata::TensorView>& fitted = model.begin_forward(0);
      const std::string dir = "consumer_weights." + std::to_string(::getpid());
      const char* names[] = {"w", "b"};
      std::vector<strata::hf::HfTensorOut> tensors;
      for (int k = 0; k < 2; ++k)
        tensors.push_back({names[k],
                           {static_cast<std::int64_t>(fitted[k].numel())},
                           [&, k](std::uint64_t begin, std::uint64_t count, float* out) {
                             std::memcpy(out, fitted[k].as<float>() + begin, count * 4);
                           }});
      // A tiny Llama's config.json: hidden 8, MLP 16, 1 layer, 2 heads of 4 on 1 key-value head, vocabulary 16, tied:
      // embeddings 16x8 = 128; q 64, k 32, v 32, o 64, gate, up, down 3x128, two norms 16; the final norm 8: 728.
      const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                     {"model_type", "llama"},
                                     {"hidden_size", 8},
                                     {"intermediate_size", 16},
                                     {"num_hidden_layers", 1},
                                     {"num_attention_heads", 2},
                                     {"num_key_value_heads", 1},
                                     {"vocab_size", 16},
                                     {"max_position_embeddings", 32},
                                     {"rms_norm_eps", 1e-5},
                                     {"rope_theta", 10000.0},
                                     {"tie_word_embeddings", true}};
      const strata::hf::HfWriteStats written =
          strata::hf::write_hf_directory(dir, config, tensors, strata::DType::kF32, fitted[0].numel() * 4);
      const strata::hf::HfConfig read_config = strata::hf::read_hf_config(dir);
      STRATA_CHECK(written.shards == 2 && !read_config.gpt2 && read_config.parameter_count() == 728,
                   "the model directory: {} shards, config.json read back as {} with {} parameters", written.shards,
                   read_config.architecture, read_config.parameter_count());
      const strata::SafetensorsReader back(dir);
      for (int k = 0; k < 2; ++k) {
        const std::vector<float> got = back.read_f32(names[k]);
        STRATA_CHECK(back.file_count() == 2 && got.size() == fitted[k].numel() &&
                         std::memcmp(got.data(), fitted[k].as<float>(), got.size() * 4) == 0,
                     "the sharded safetensors set did not read back tensor {}", names[k]);
      }
      model.end_forward(0);
      std::filesystem::remove_all(dir);
    } else {
      model.begin_forward(0);
      model.end_forward(0);
    }
    if (rt.rank() == 0)
      std::printf(
          "consumer: ok, %d ranks, loss %.6f -> %.6f; own optimizer resumed bitwise from its checkpoint, state "
          "memory as predicted; tp %d loss %.6f -> %.6f (installed kernels: %.6f); generated %s\n",
          rt.world_size(), first, last, split.tp().size(), tp_first, tp_last, lib_last, tokens.c_str());
    return 0;
  });
}
