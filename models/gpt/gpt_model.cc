// GptModel: units, spec init, and forward/backward of the spec's GPT-2 over ShardedModel, through the GptKernels of
// the model's device.
#include "models/gpt/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "models/common/hash.h"
#include "models/gpt/gpt_kernels.h"
#include "core/error.h"

namespace strata::gpt {

// ---- configuration and units ------------------------------------------------------------------------------------

void GptConfig::validate() const {
  STRATA_CHECK(layers >= 1, "--layers {} must be at least 1", layers);
  STRATA_CHECK(heads >= 1 && embd >= 1 && embd % heads == 0, "--embd {} must be a positive multiple of --heads {}",
               embd, heads);
  STRATA_CHECK(vocab >= 2 && vocab <= 65536, "--vocab {} must be in [2, 65536] (tokens are uint16)", vocab);
  STRATA_CHECK(ctx >= 1, "--ctx {} must be at least 1", ctx);
}

std::string GptConfig::describe() const {
  return fmt::format("GPT-2 L={} H={} C={} V={} ctx={}", layers, heads, embd, vocab, ctx);
}

namespace {
// Slot order inside a block unit (the kernels index views by it).
enum BlockSlot {
  kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kBlockSlots
};
enum EmbSlot { kWte, kWpe };
enum LnfSlot { kLnfW, kLnfB };
}  // namespace

std::vector<UnitSpec> gpt_units(const GptConfig& c) {
  const std::int64_t C = c.embd;
  std::vector<UnitSpec> units;
  // 2-D parameters are decayed, 1-D ones are not (spec, Step 4).
  units.push_back({"embeddings", {{"wte.weight", {c.vocab, C}, true}, {"wpe.weight", {c.ctx, C}, true}}});
  for (int i = 0; i < c.layers; ++i) {
    std::string p = "h." + std::to_string(i) + ".";
    units.push_back({"h." + std::to_string(i),
                     {{p + "ln_1.weight", {C}, false},
                      {p + "ln_1.bias", {C}, false},
                      {p + "attn.c_attn.weight", {C, 3 * C}, true},
                      {p + "attn.c_attn.bias", {3 * C}, false},
                      {p + "attn.c_proj.weight", {C, C}, true},
                      {p + "attn.c_proj.bias", {C}, false},
                      {p + "ln_2.weight", {C}, false},
                      {p + "ln_2.bias", {C}, false},
                      {p + "mlp.c_fc.weight", {C, 4 * C}, true},
                      {p + "mlp.c_fc.bias", {4 * C}, false},
                      {p + "mlp.c_proj.weight", {4 * C, C}, true},
                      {p + "mlp.c_proj.bias", {C}, false}}});
  }
  units.push_back({"ln_f", {{"ln_f.weight", {C}, false}, {"ln_f.bias", {C}, false}}});
  return units;
}

int embeddings_unit() { return 0; }
int block_unit(int layer) { return 1 + layer; }
int final_norm_unit(const GptConfig& cfg) { return 1 + cfg.layers; }

namespace {
using models::splitmix64;
double unit_uniform(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
}  // namespace

void spec_init(const GptConfig& cfg, const ParamSlot& slot, std::size_t begin, std::size_t count, float* out,
               std::uint64_t seed) {
  const std::string& n = slot.name;
  auto ends = [&](const char* s) { return n.size() >= std::strlen(s) && n.compare(n.size() - std::strlen(s), std::string::npos, s) == 0; };
  if (ends(".bias")) {
    std::fill(out, out + count, 0.0f);
    return;
  }
  if (ends("ln_1.weight") || ends("ln_2.weight") || n == "ln_f.weight") {
    std::fill(out, out + count, 1.0f);
    return;
  }
  double sigma = 0.02;
  if (ends("c_proj.weight")) sigma = 0.02 / std::sqrt(2.0 * cfg.layers);
  std::uint64_t h = models::fnv1a(n);
  for (std::size_t k = 0; k < count; ++k) {
    // Box-Muller on two counter-based uniforms: element (begin + k) of this parameter, for this seed.
    std::uint64_t idx = begin + k;
    double u1 = unit_uniform(splitmix64(h ^ splitmix64(seed ^ splitmix64(2 * idx))));
    double u2 = unit_uniform(splitmix64(h ^ splitmix64(seed ^ splitmix64(2 * idx + 1))));
    out[k] = static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
}

// ---- the model ---------------------------------------------------------------------------------------------------

namespace {

// One unit's parameters (and gradients) as f32 arrays: the gathered views themselves when they are f32, else
// converted copies in a workspace buffer (gradients added back into the views after the backward).
class UnitF32 {
 public:
  UnitF32(Device& dev, GptKernels& k, std::size_t max_numel) : k_(k) {
    params_ = dev.allocate(max_numel * 4, MemCategory::kWorkspace);
    grads_ = dev.allocate(max_numel * 4, MemCategory::kWorkspace);
  }
  void load(const std::vector<TensorView>& views) {
    p_.clear();
    for (const TensorView& v : views) {
      if (v.dtype == DType::kF32) {
        p_.push_back(v.as<float>());
      } else {
        float* dst = params_.as<float>() + v.slot->offset;
        k_.to_f32(v.data, v.dtype, dst, v.numel());
        p_.push_back(dst);
      }
    }
  }
  void open_grads(const std::vector<TensorView>& views) {
    g_.clear();
    for (const TensorView& v : views) {
      if (v.dtype == DType::kF32) {
        g_.push_back(v.as<float>());
      } else {
        float* dst = grads_.as<float>() + v.slot->offset;
        k_.zero(dst, v.numel() * 4);
        g_.push_back(dst);
      }
    }
  }
  void close_grads(const std::vector<TensorView>& views) {
    for (std::size_t k = 0; k < views.size(); ++k) {
      const TensorView& v = views[k];
      if (v.dtype != DType::kF32)
        k_.add_f32_into(v.data, v.dtype, g_[k], v.numel());  // f32 views were written in place
    }
  }
  const float* p(int k) const { return p_[static_cast<std::size_t>(k)]; }
  float* g(int k) const { return g_[static_cast<std::size_t>(k)]; }

 private:
  GptKernels& k_;
  Buffer params_, grads_;
  std::vector<const float*> p_;
  std::vector<float*> g_;
};

// Everything a block's backward needs from its forward.
struct BlockActs {
  Buffer ln1, ln1_mean, ln1_rstd, qkv, atty, lse, x_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
};

}  // namespace

struct GptModel::Impl {
  GptConfig cfg;
  ShardedModel& model;
  Device& dev;
  std::unique_ptr<GptKernels> k;  // every kernel, zeroing, conversion and copy goes through it
  int B, T, N;
  bool recompute;
  std::vector<Buffer> x_in;       // per layer: the block input [N, C]; x_in[L] is the final residual stream
  std::vector<BlockActs> acts;    // per layer (one shared set under recompute)
  Buffer attproj, fcproj;         // forward scratch [N, C]
  Buffer lnf, lnf_mean, lnf_rstd, logits, losses;
  Buffer dres, dln, datty, dqkv, dfch, dfch_gelu;  // backward scratch
  Buffer tokens_in, tokens_tgt;  // the micro-batch's tokens [N] in the device's memory
  std::unique_ptr<UnitF32> emb, unit;

  Impl(const GptConfig& c, ShardedModel& m, Device& d, int b, int t, bool rc)
      : cfg(c), model(m), dev(d), k(make_gpt_kernels(d)), B(b), T(t), N(b * t), recompute(rc) {
    const std::size_t C = static_cast<std::size_t>(cfg.embd), n = static_cast<std::size_t>(N);
    auto act = [&](std::size_t floats) { return dev.allocate(floats * 4, MemCategory::kActivations); };
    auto work = [&](std::size_t floats) { return dev.allocate(floats * 4, MemCategory::kWorkspace); };
    for (int l = 0; l <= cfg.layers; ++l) x_in.push_back(act(n * C));
    int sets = recompute ? 1 : cfg.layers;
    for (int l = 0; l < sets; ++l) {
      auto kind = recompute ? MemCategory::kWorkspace : MemCategory::kActivations;
      auto a = [&](std::size_t floats) { return dev.allocate(floats * 4, kind); };
      acts.push_back(BlockActs{a(n * C), a(n), a(n), a(n * 3 * C), a(n * C),
                               a(static_cast<std::size_t>(B) * cfg.heads * T), a(n * C), a(n * C), a(n), a(n),
                               a(n * 4 * C), a(n * 4 * C)});
    }
    attproj = work(n * C);
    fcproj = work(n * C);
    lnf = act(n * C);
    lnf_mean = act(n);
    lnf_rstd = act(n);
    logits = act(n * static_cast<std::size_t>(cfg.vocab));
    losses = act(n);
    dres = work(n * C);
    dln = work(n * C);
    datty = work(n * C);
    dqkv = work(n * 3 * C);
    dfch = work(n * 4 * C);
    dfch_gelu = work(n * 4 * C);
    tokens_in = dev.allocate(n * sizeof(std::int32_t), MemCategory::kWorkspace);
    tokens_tgt = dev.allocate(n * sizeof(std::int32_t), MemCategory::kWorkspace);
    std::size_t emb_numel = model.layout(embeddings_unit()).padded_numel();
    std::size_t max_numel = 0;
    for (int u = 1; u < model.num_units(); ++u)
      max_numel = std::max(max_numel, model.layout(u).padded_numel());
    emb = std::make_unique<UnitF32>(dev, *k, emb_numel);
    unit = std::make_unique<UnitF32>(dev, *k, max_numel);
  }

  BlockActs& acts_for(int layer) { return acts[recompute ? 0 : static_cast<std::size_t>(layer)]; }

  void block_forward(int layer, const UnitF32& p) {
    const int C = cfg.embd, NH = cfg.heads;
    BlockActs& a = acts_for(layer);
    const float* x = x_in[static_cast<std::size_t>(layer)].as<float>();
    float* out = x_in[static_cast<std::size_t>(layer) + 1].as<float>();
    k->layernorm_forward(a.ln1.as<float>(), a.ln1_mean.as<float>(), a.ln1_rstd.as<float>(), x, p.p(kLn1W), p.p(kLn1B),
                         N, C);
    k->matmul_forward(a.qkv.as<float>(), a.ln1.as<float>(), p.p(kAttnW), p.p(kAttnB), N, C, 3 * C);
    k->attention_forward(a.atty.as<float>(), a.lse.as<float>(), a.qkv.as<float>(), B, T, C, NH);
    k->matmul_forward(attproj.as<float>(), a.atty.as<float>(), p.p(kProjW), p.p(kProjB), N, C, C);
    k->residual_forward(a.x_mid.as<float>(), x, attproj.as<float>(), static_cast<std::size_t>(N) * C);
    k->layernorm_forward(a.ln2.as<float>(), a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(), a.x_mid.as<float>(),
                         p.p(kLn2W), p.p(kLn2B), N, C);
    k->matmul_forward(a.fch.as<float>(), a.ln2.as<float>(), p.p(kFcW), p.p(kFcB), N, C, 4 * C);
    k->gelu_forward(a.fch_gelu.as<float>(), a.fch.as<float>(), static_cast<std::size_t>(N) * 4 * C);
    k->matmul_forward(fcproj.as<float>(), a.fch_gelu.as<float>(), p.p(kFcProjW), p.p(kFcProjB), N, 4 * C, C);
    k->residual_forward(out, a.x_mid.as<float>(), fcproj.as<float>(), static_cast<std::size_t>(N) * C);
  }

  // dres holds d(block output) on entry and d(block input) on exit.
  void block_backward(int layer, const UnitF32& p) {
    const int C = cfg.embd, NH = cfg.heads;
    const std::size_t nC = static_cast<std::size_t>(N) * C;
    BlockActs& a = acts_for(layer);
    const float* x = x_in[static_cast<std::size_t>(layer)].as<float>();
    float* d = dres.as<float>();
    k->zero(dfch_gelu.data(), nC * 4 * 4);
    k->matmul_backward(dfch_gelu.as<float>(), p.g(kFcProjW), p.g(kFcProjB), d, a.fch_gelu.as<float>(), p.p(kFcProjW), N,
                       4 * C, C);
    k->zero(dfch.data(), nC * 4 * 4);
    k->gelu_backward(dfch.as<float>(), a.fch.as<float>(), dfch_gelu.as<float>(), nC * 4);
    k->zero(dln.data(), nC * 4);
    k->matmul_backward(dln.as<float>(), p.g(kFcW), p.g(kFcB), dfch.as<float>(), a.ln2.as<float>(), p.p(kFcW), N, C,
                       4 * C);
    k->layernorm_backward(d, p.g(kLn2W), p.g(kLn2B), dln.as<float>(), a.x_mid.as<float>(), p.p(kLn2W),
                          a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(), N, C);
    k->zero(datty.data(), nC * 4);
    k->matmul_backward(datty.as<float>(), p.g(kProjW), p.g(kProjB), d, a.atty.as<float>(), p.p(kProjW), N, C, C);
    k->zero(dqkv.data(), nC * 3 * 4);
    k->attention_backward(dqkv.as<float>(), datty.as<float>(), a.atty.as<float>(), a.lse.as<float>(), a.qkv.as<float>(),
                          B, T, C, NH);
    k->zero(dln.data(), nC * 4);
    k->matmul_backward(dln.as<float>(), p.g(kAttnW), p.g(kAttnB), dqkv.as<float>(), a.ln1.as<float>(), p.p(kAttnW), N,
                       C, 3 * C);
    k->layernorm_backward(d, p.g(kLn1W), p.g(kLn1B), dln.as<float>(), x, p.p(kLn1W), a.ln1_mean.as<float>(),
                          a.ln1_rstd.as<float>(), N, C);
  }

  // Forward through every unit; leaves the embeddings unit open (it is the tied LM head). in and tgt are N host
  // tokens, uploaded to tokens_in / tokens_tgt (the backward reads tokens_in). Returns the mean loss and leaves
  // dlogits (scaled by dscale) in `logits` when dscale != 0.
  double forward(const std::int32_t* in, const std::int32_t* tgt, float dscale) {
    const int C = cfg.embd, V = cfg.vocab, L = cfg.layers;
    STRATA_CHECK(T <= cfg.ctx, "sequence length {} exceeds the context {}", T, cfg.ctx);
    k->upload_tokens(tokens_in.as<std::int32_t>(), in, static_cast<std::size_t>(N));
    k->upload_tokens(tokens_tgt.as<std::int32_t>(), tgt, static_cast<std::size_t>(N));
    emb->load(model.begin_forward(embeddings_unit()));
    k->encoder_forward(x_in[0].as<float>(), tokens_in.as<std::int32_t>(), emb->p(kWte), emb->p(kWpe), B, T, C);
    for (int l = 0; l < L; ++l) {
      unit->load(model.begin_forward(block_unit(l)));
      block_forward(l, *unit);
      model.end_forward(block_unit(l));
    }
    int f = final_norm_unit(cfg);
    unit->load(model.begin_forward(f));
    k->layernorm_forward(lnf.as<float>(), lnf_mean.as<float>(), lnf_rstd.as<float>(),
                         x_in[static_cast<std::size_t>(L)].as<float>(), unit->p(kLnfW), unit->p(kLnfB), N, C);
    model.end_forward(f);
    k->lm_head_forward(logits.as<float>(), lnf.as<float>(), emb->p(kWte), N, C, V);
    k->crossentropy_softmax(losses.as<float>(), logits.as<float>(), logits.as<float>(), tokens_tgt.as<std::int32_t>(),
                            N, V, dscale);
    model.end_forward(embeddings_unit());
    return k->sum(losses.as<float>(), static_cast<std::size_t>(N)) / N;
  }

  void backward() {
    const int C = cfg.embd, V = cfg.vocab, L = cfg.layers;
    BackwardViews ev = model.begin_backward(embeddings_unit());
    emb->load(ev.params);
    emb->open_grads(ev.grads);
    k->zero(dln.data(), static_cast<std::size_t>(N) * C * 4);
    k->lm_head_backward(dln.as<float>(), emb->g(kWte), logits.as<float>(), lnf.as<float>(), emb->p(kWte), N, C, V);
    int f = final_norm_unit(cfg);
    BackwardViews fv = model.begin_backward(f);
    unit->load(fv.params);
    unit->open_grads(fv.grads);
    k->zero(dres.data(), static_cast<std::size_t>(N) * C * 4);
    k->layernorm_backward(dres.as<float>(), unit->g(kLnfW), unit->g(kLnfB), dln.as<float>(),
                          x_in[static_cast<std::size_t>(L)].as<float>(), unit->p(kLnfW), lnf_mean.as<float>(),
                          lnf_rstd.as<float>(), N, C);
    unit->close_grads(fv.grads);
    model.end_backward(f);
    for (int l = L - 1; l >= 0; --l) {
      BackwardViews bv = model.begin_backward(block_unit(l));
      unit->load(bv.params);
      if (recompute) block_forward(l, *unit);  // only x_in[l] was kept; rebuild the block's activations
      unit->open_grads(bv.grads);
      block_backward(l, *unit);
      unit->close_grads(bv.grads);
      model.end_backward(block_unit(l));
    }
    k->encoder_backward(emb->g(kWte), emb->g(kWpe), dres.as<float>(), tokens_in.as<std::int32_t>(), B, T, C);
    emb->close_grads(ev.grads);
    model.end_backward(embeddings_unit());
  }
};

GptModel::GptModel(const GptConfig& cfg, ShardedModel& model, Device& device, int B, int T, bool recompute)
    : impl_(std::make_unique<Impl>(cfg, model, device, B, T, recompute)) {
  cfg.validate();
  STRATA_CHECK(B >= 1 && T >= 1 && T <= cfg.ctx, "batch {} x sequence {} (context {})", B, T, cfg.ctx);
}

GptModel::~GptModel() = default;

double GptModel::forward_backward(const std::int32_t* inputs, const std::int32_t* targets, float grad_scale) {
  double loss = impl_->forward(inputs, targets, grad_scale / static_cast<float>(impl_->N));
  impl_->backward();
  return loss;
}

double GptModel::forward_loss(const std::int32_t* inputs, const std::int32_t* targets) {
  // A forward with no backward still goes through the protocol: forward marks units done, so nothing to undo.
  return impl_->forward(inputs, targets, 0.0f);
}

std::size_t GptModel::activation_bytes_kept() const {
  std::size_t total = 0;
  for (const Buffer& b : impl_->x_in) total += b.bytes();
  if (!impl_->recompute)
    for (const BlockActs& a : impl_->acts)
      for (const Buffer* b : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.atty, &a.lse, &a.x_mid, &a.ln2, &a.ln2_mean,
                              &a.ln2_rstd, &a.fch, &a.fch_gelu})
        total += b->bytes();
  for (const Buffer* b : {&impl_->lnf, &impl_->lnf_mean, &impl_->lnf_rstd, &impl_->logits, &impl_->losses})
    total += b->bytes();
  return total;
}

}  // namespace strata::gpt
