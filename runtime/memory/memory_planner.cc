// MemoryPlanner: the per-category arithmetic, the fit check with advice, and the step-time estimate.
#include "runtime/memory/memory_planner.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "core/checked_math.h"
#include "core/error.h"

namespace strata {

double ModelShape::norm_params() const { return rms_norm ? hidden : 2.0 * hidden; }

double ModelShape::layer_per_rank(int tp) const {
  const double h = hidden, q = q_width(), F = static_cast<double>(ffn_width());
  const double matrices = gated ? 3 : 2;
  // Split over the tp group: q and o, the MLP's matrices, and the column-parallel biases (q's, and the MLP's up-side
  // ones under GPT-2's biases); k and v too when the group divides their heads. The rest is on every rank.
  double split = 2 * h * q + matrices * h * F;
  double whole = 2 * norm_params();
  const bool kv_split = kv_heads <= 0 || kv_heads % tp == 0;
  const double kv = kv_split ? kv_width() : kv_width_per_rank(tp);  // k's (and v's) width, split or here
  (kv_split ? split : whole) += 2 * h * kv;
  const bool qkv_biases = !rms_norm || qkv_bias;
  if (qkv_biases) {
    split += q;
    (kv_split ? split : whole) += 2 * kv;
  }
  if (!rms_norm) {
    split += (matrices - 1) * F;  // fc (GELU) or gate and up (gated)
    whole += 2 * h;               // the attention's and the MLP's output biases (row-parallel)
  } else if (out_bias) {
    whole += h;
  }
  return split / tp + whole;
}

double ModelShape::embedding_per_rank(int tp) const {
  const double vocab_rows = static_cast<double>((static_cast<std::int64_t>(vocab) + tp - 1) / tp);
  return (vocab_rows * (tied ? 1 : 2) + (rotary ? 0 : seq)) * static_cast<double>(hidden);
}

double ModelShape::count() const {
  if (params > 0) return params;
  return layers * layer_per_rank(1) + embedding_per_rank(1) + norm_params();
}

double ModelShape::count_per_rank(int tp) const {
  if (params > 0) return params / tp;
  return layers * layer_per_rank(tp) + embedding_per_rank(tp) + norm_params();
}

std::string grouped_count(double count) {
  if (!std::isfinite(count) || std::fabs(count) >= 9.2e18) return fmt::format("{:g}", count);
  const long long n = std::llround(count);
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void PlanInput::validate() const {
  const ModelShape& m = model;
  const ParallelLayout& L = layout;
  const Hardware& hw = hardware;
  STRATA_CHECK(m.layers >= 1 && m.hidden >= 1 && m.heads >= 1 && m.seq >= 1,
               "--layers {}, --hidden {}, --heads {} and --seq {} must each be at least 1", m.layers, m.hidden, m.heads,
               m.seq);
  STRATA_CHECK(m.vocab >= 0, "--vocab {} must be >= 0", m.vocab);
  recompute.validate(m.layers);
  STRATA_CHECK(std::isfinite(m.params) && m.params >= 0, "--params {} must be a finite number >= 0 (0: from the "
               "dimensions)", m.params);
  STRATA_CHECK(m.head_dim > 0 || m.hidden % m.heads == 0,
               "--heads {} must divide --hidden {} (each head has hidden / heads channels; or give --head-dim)",
               m.heads, m.hidden);
  STRATA_CHECK(m.kv_heads >= 0 && m.head_dim >= 0 && m.ffn >= 0,
               "--kv-heads {}, --head-dim {} and --ffn {} must each be >= 0 (0: the GPT-2 default)", m.kv_heads,
               m.head_dim, m.ffn);
  STRATA_CHECK(m.heads % m.kv_head_count() == 0,
               "--kv-heads {} must divide --heads {} (grouped-query attention: each key / value head serves heads / "
               "kv-heads query heads)", m.kv_heads, m.heads);
  STRATA_CHECK(micro_batch >= 1, "--micro-batch {} must be at least 1", micro_batch);
  STRATA_CHECK(L.dp >= 1 && L.tp >= 1 && L.pp >= 1 && L.cp >= 1,
               "--dp {}, --tp {}, --pp {} and --cp {} must each be at least 1", L.dp, L.tp, L.pp, L.cp);
  STRATA_CHECK(L.cp == 1 || m.seq % (2 * L.cp) == 0,
               "--seq {} must divide by 2 x --cp = {} (each rank holds two mirrored chunks)", m.seq, 2 * L.cp);
  STRATA_CHECK(hw.nodes >= 1 && hw.devices_per_node >= 1, "--nodes {} and --devices-per-node {} must be at least 1",
               hw.nodes, hw.devices_per_node);
  const std::uint64_t available =
      checked_product("the devices (--nodes x --devices-per-node)", hw.nodes, hw.devices_per_node);
  const std::uint64_t devices = checked_product("the devices (--dp x --tp x --pp x --cp)", L.dp, L.tp, L.pp, L.cp);
  const std::string layout = fmt::format("--dp {} x --tp {} x --pp {}{}", L.dp, L.tp, L.pp,
                                         L.cp == 1 ? std::string() : fmt::format(" x --cp {}", L.cp));
  STRATA_CHECK(devices <= static_cast<std::uint64_t>(kMaxPlanDevices), "{} = {} devices: at most {} are supported",
               layout, devices, kMaxPlanDevices);
  STRATA_CHECK(devices <= available, "{} = {} devices, but --nodes {} x --devices-per-node {} = {}", layout, devices,
               hw.nodes, hw.devices_per_node, available);
  STRATA_CHECK(m.heads % L.tp == 0 && m.hidden % L.tp == 0,
               "--tp {} must divide --heads {} and --hidden {} (each tensor-parallel rank holds whole heads)", L.tp,
               m.heads, m.hidden);
  STRATA_CHECK(m.ffn_width() % L.tp == 0, "--tp {} must divide the MLP's width {} (--ffn; each rank holds ffn / tp "
               "of it)", L.tp, m.ffn_width());
  STRATA_CHECK(m.kv_head_count() % L.tp == 0 || L.tp % m.kv_head_count() == 0,
               "--tp {} neither divides --kv-heads {} nor is a multiple of it (each rank holds whole key / value "
               "heads: kv-heads / tp, or one replicated over tp / kv-heads ranks)", L.tp, m.kv_head_count());
  STRATA_CHECK(!L.sequence_parallel || L.tp > 1, "--sequence-parallel needs --tp 2 or more (it splits over the tp "
               "group)");
  STRATA_CHECK(!L.sequence_parallel || m.seq % L.tp == 0,
               "--seq {} must divide by --tp {} under --sequence-parallel (each rank holds seq / tp positions)", m.seq,
               L.tp);
  STRATA_CHECK_CODE(
      ErrorCode::kUnsupported, L.cp == 1 || !L.sequence_parallel,
      "--cp {} with --sequence-parallel: the runtime's context parallelism does not compose with sequence "
      "parallelism yet (train_gpt refuses it), so there is no such layout to plan; drop one of them",
      L.cp);
  STRATA_CHECK(L.pp <= m.layers, "--pp {} pipeline stages for --layers {}: each stage needs at least one layer", L.pp,
               m.layers);
  STRATA_CHECK(L.dp_replicate >= 1 && L.dp % L.dp_replicate == 0,
               "--dp-replicate {} must divide --dp {} (each replica group shards over dp / dp-replicate ranks)",
               L.dp_replicate, L.dp);
  STRATA_CHECK(offload != OffloadPolicy::kOptimizerAndParams || L.stage == ZeroStage::kParameters,
               "--offload optimizer+params needs --zero-stage 3 (stage {} keeps the full parameters on every "
               "device); use --offload optimizer instead",
               static_cast<int>(L.stage));
  STRATA_CHECK(prefetch_depth >= 0 && prefetch_depth <= 8, "--prefetch {} must be in [0, 8]", prefetch_depth);
  STRATA_CHECK(std::isfinite(hw.device_memory) && hw.device_memory > 0, "--device-memory must be more than 0 bytes, "
               "got {}", hw.device_memory);
  STRATA_CHECK(std::isfinite(hw.link_gbs) && hw.link_gbs >= 0, "--link-gbs {} must be a finite number > 0 (or 0: no "
               "estimate)", hw.link_gbs);
  STRATA_CHECK(std::isfinite(hw.peak_tflops) && hw.peak_tflops >= 0, "--tflops {} must be a finite number > 0 (or 0: "
               "no estimate)", hw.peak_tflops);
  STRATA_CHECK(std::isfinite(hw.efficiency) && hw.efficiency > 0 && hw.efficiency <= 1,
               "efficiency {} must be in (0, 1]", hw.efficiency);
  STRATA_CHECK(std::isfinite(hw.pcie_gbs) && hw.pcie_gbs > 0, "host link {} GB/s must be a finite number > 0",
               hw.pcie_gbs);
}

int ParallelLayout::shard_size() const {
  if (stage == ZeroStage::kNone) return 1;
  return dp / dp_replicate * cp;
}

double activation_bytes_of(const PlanInput& in, BlockRecompute kind) {
  const ModelShape& m = in.model;
  const double s = static_cast<double>(m.seq) / in.layout.cp;  // this rank's tokens of a sequence
  const double b = in.micro_batch, h = m.hidden, a = m.heads, t = in.layout.tp;
  const double width = static_cast<double>(dtype_size(in.precision.param_dtype)) / 2.0;  // the formulas are 16-bit
  // Sequence parallelism splits the regions tensor parallelism leaves whole (and the layer input) along the sequence.
  const double sp = in.layout.sequence_parallel ? t : 1.0;
  const double scores = in.tiled_attention ? 0.0 : 5 * a * s / (h * t);
  // The tp-split terms in units of h, 24 for a GPT-2 block: q, k, v and the attention core's output (2 bytes a
  // channel each; k and v of the kv heads a rank holds, times t) and the MLP's (GELU: its input and output, 2 ffn
  // each; SwiGLU: gate, up and their product).
  const double F = static_cast<double>(m.ffn_width());
  const double q = m.q_width(), kv = m.kv_width_per_rank(in.layout.tp) * t;
  const double act = 2 * F / h;  // the activation's output, which --recompute mlp drops (8 for a GPT-2 block)
  const double split = (4 * q + 4 * kv + (m.gated ? 6 : 4) * F) / h;
  const double all = 10 / sp + split / t + scores;
  double per_token = all;
  switch (kind) {
    case BlockRecompute::kNone:
    case BlockRecompute::kOffload: break;
    case BlockRecompute::kFull: per_token = 2 / sp; break;
    case BlockRecompute::kMlp: per_token = all - act / t; break;
    case BlockRecompute::kAttention: per_token = all - scores - 2 * q / h / t; break;
  }
  return s * b * h * per_token * width;
}

namespace {
// The layers of one pipeline stage (the first: planner figures are the first stage's, which 1F1B loads most).
int stage_layers(const PlanInput& in) { return std::max(1, in.model.layers / std::max(1, in.layout.pp)); }
}  // namespace

double activation_bytes_per_layer(const PlanInput& in) {
  const int n = stage_layers(in);
  double sum = 0;
  for (int l = 0; l < n; ++l) {
    const BlockRecompute kind = in.recompute.at(l);
    sum += kind == BlockRecompute::kOffload ? 0.0 : activation_bytes_of(in, kind);
  }
  return sum / n;
}

double recompute_flops_per_token(const PlanInput& in, BlockRecompute kind) {
  // QK^T and AV: 4 x the query width x s (the hidden size for a GPT-2 block).
  const double q = in.model.q_width(), s = static_cast<double>(in.model.seq) / in.layout.cp, t = in.layout.tp;
  switch (kind) {
    case BlockRecompute::kFull: return 2 * in.model.layer_per_rank(in.layout.tp) + 4 * q * s / t;
    case BlockRecompute::kAttention: return 4 * q * s / t;
    default: return 0;
  }
}

double recompute_forward_fraction(const PlanInput& in) {
  const int n = stage_layers(in);
  const double forward = recompute_flops_per_token(in, BlockRecompute::kFull);
  double sum = 0;
  for (int l = 0; l < n; ++l) sum += recompute_flops_per_token(in, in.recompute.at(l)) / forward;
  return sum / n;
}

namespace {

MemoryPlan compute(const PlanInput& in) {
  const ParallelLayout& L = in.layout;
  STRATA_CHECK(L.dp >= 1 && L.tp >= 1 && L.pp >= 1, "dp {}, tp {}, pp {} must be at least 1", L.dp, L.tp, L.pp);
  STRATA_CHECK(L.dp_replicate >= 1 && L.dp % L.dp_replicate == 0, "dp_replicate {} must divide dp {}",
               L.dp_replicate, L.dp);
  STRATA_CHECK(in.model.layers >= 1 && in.model.hidden >= 1 && in.model.heads >= 1 && in.model.seq >= 1,
               "the model needs layers, hidden, heads and seq (got {}, {}, {}, {})", in.model.layers, in.model.hidden,
               in.model.heads, in.model.seq);
  STRATA_CHECK(in.model.heads % L.tp == 0 && in.model.hidden % L.tp == 0,
               "tp {} must divide the heads {} and the hidden size {} (each rank holds whole heads)", L.tp,
               in.model.heads, in.model.hidden);
  STRATA_CHECK(!L.sequence_parallel || in.model.seq % L.tp == 0,
               "sequence parallelism: tp {} must divide the sequence length {}", L.tp, in.model.seq);
  const double psi = in.model.count_per_rank(L.tp) / L.pp;  // this rank's pipeline stage and tensor slice
  const double D = L.shard_size();
  const double opt_div = L.stage == ZeroStage::kNone ? 1.0 : D;
  const double psz = static_cast<double>(dtype_size(in.precision.param_dtype));
  const double rsz = static_cast<double>(dtype_size(in.precision.reduce_dtype));
  const double layer = in.model.layer_per_rank(L.tp);  // one unit (a transformer block), this rank's tensor slice

  MemoryPlan p;
  p.params = psz * psi / (L.stage == ZeroStage::kParameters ? D : 1.0);
  p.grads = (L.stage == ZeroStage::kNone || L.stage == ZeroStage::kOptimizerState) ? psz * psi : 2 * psz * layer;
  p.grad_shard = 4 * psi / opt_div;
  p.master = psz == 4 ? 0 : 4 * psi / opt_div;
  p.optim_state = 8 * psi / opt_div;
  p.unsharded = L.stage == ZeroStage::kParameters ? (in.prefetch_depth + 1) * psz * layer : 0;
  const bool convert = in.precision.reduce_dtype != in.precision.param_dtype;
  p.comm_buffers = layer * rsz * ((convert ? 2.0 : 0.0) + 2.0 / D + 1.0);
  const double layers_here = static_cast<double>(in.model.layers) / L.pp;
  const double in_flight = L.pp > 1 ? L.pp : 1;  // 1F1B: the first stage holds pp micro-batches
  // The logits of the whole sequence (gathered before the head under sequence parallelism), vocabulary-parallel; this
  // rank's chunks of it under cp.
  const double tokens_here = static_cast<double>(in.model.seq) / L.cp * in.micro_batch;
  const double head = tokens_here * in.model.vocab * (psz + 4) / L.tp;
  // The ring's two key / value blocks and two of their gradients: [micro-batch, seq / cp, 2 x the rank's key / value
  // width] each (2 hidden / tp for a GPT-2 block).
  if (L.cp > 1) p.comm_buffers += 4 * tokens_here * 2 * in.model.kv_width_per_rank(L.tp) * psz;
  p.activations = layers_here * activation_bytes_per_layer(in) * in_flight + head;
  const int offloaded = in.recompute.count(BlockRecompute::kOffload, stage_layers(in));
  if (offloaded > 0) {  // the offloaded layers in host memory, two of them staged on the device
    const double layer_acts = activation_bytes_of(in, BlockRecompute::kOffload);
    p.host += layers_here / stage_layers(in) * offloaded * layer_acts * in_flight;
    p.activations += 2 * layer_acts;
  }
  p.recompute_flops = recompute_forward_fraction(in) * recompute_flops_per_token(in, BlockRecompute::kFull) *
                      layers_here * tokens_here;
  if (in.offload != OffloadPolicy::kNone) {
    p.host += p.master + p.optim_state + p.grad_shard;
    p.master = p.optim_state = p.grad_shard = 0;
    if (in.offload == OffloadPolicy::kOptimizerAndParams && L.stage == ZeroStage::kParameters) {
      p.host += p.params;
      p.params = psz * layer;  // the next unit's shard staged on the device
    }
  }
  p.total = p.params + p.grads + p.grad_shard + p.master + p.optim_state + p.unsharded + p.comm_buffers +
            p.activations;
  p.fits = p.total <= in.hardware.device_memory;

  const Hardware& hw = in.hardware;
  if (hw.peak_tflops > 0) {
    double tokens = tokens_here;
    double flops = 6.0 * psi * tokens + 2.0 * psi * tokens * recompute_forward_fraction(in);
    p.step_compute_s = flops / (hw.peak_tflops * 1e12 * hw.efficiency);
  }
  if (hw.link_gbs > 0 && L.dp > 1) {
    double frac = (D - 1) / D;
    double bytes = 0;
    if (L.stage == ZeroStage::kParameters) bytes = psi * (2 * psz + rsz) * frac;
    else if (L.stage == ZeroStage::kNone) bytes = 2 * psi * rsz * (L.dp - 1.0) / L.dp;
    else bytes = psi * (psz + rsz) * frac;
    p.step_comm_s = bytes / (hw.link_gbs * 1e9);
    if (in.offload != OffloadPolicy::kNone) p.step_comm_s += psi / opt_div * (4 + psz) / (hw.pcie_gbs * 1e9);
  }
  return p;
}

}  // namespace

std::vector<PlanChange> fit_changes(const PlanInput& in) {
  std::vector<PlanChange> changes;
  auto add = [&](std::string what, auto&& edit) {
    PlanInput c = in;
    edit(c);
    changes.push_back({std::move(what), c});
  };
  // Sequence parallelism costs no extra communication (an all-reduce becomes a reduce-scatter and an all-gather).
  if (in.layout.tp > 1 && in.layout.cp == 1 && !in.layout.sequence_parallel && in.model.seq % in.layout.tp == 0)
    add("turn on sequence parallelism (--sequence-parallel)",
        [](PlanInput& c) { c.layout.sequence_parallel = true; });
  // Recomputation, cheapest first: the GELU's output alone (no matrix products again), then every layer whole.
  if (!in.recompute.any())
    add("recompute the MLP's GELU (--recompute mlp)",
        [](PlanInput& c) { c.recompute = RecomputePolicy::uniform(BlockRecompute::kMlp); });
  if (!in.recompute.any() && !in.tiled_attention)
    add("recompute the attention core (--recompute attention)",
        [](PlanInput& c) { c.recompute = RecomputePolicy::uniform(BlockRecompute::kAttention); });
  if (in.recompute != RecomputePolicy::full())
    add("turn on activation recomputation (--recompute)", [](PlanInput& c) { c.recompute = RecomputePolicy::full(); });
  if (in.layout.stage != ZeroStage::kParameters)
    add("shard parameters too (--zero-stage 3)", [](PlanInput& c) { c.layout.stage = ZeroStage::kParameters; });
  if (in.recompute != RecomputePolicy::full() && in.layout.stage != ZeroStage::kParameters)
    add("--zero-stage 3 and --recompute", [](PlanInput& c) {
      c.layout.stage = ZeroStage::kParameters;
      c.recompute = RecomputePolicy::full();
    });
  if (in.offload == OffloadPolicy::kNone)
    add("offload the optimizer to host memory (--recompute and --offload optimizer)", [](PlanInput& c) {
      c.offload = OffloadPolicy::kOptimizer;
      c.recompute = RecomputePolicy::full();
    });
  if (in.offload == OffloadPolicy::kNone && in.layout.stage != ZeroStage::kParameters)
    add("--zero-stage 3, --recompute and --offload optimizer", [](PlanInput& c) {
      c.layout.stage = ZeroStage::kParameters;
      c.recompute = RecomputePolicy::full();
      c.offload = OffloadPolicy::kOptimizer;
    });
  if (in.offload != OffloadPolicy::kOptimizerAndParams)
    add("--zero-stage 3, --recompute and --offload optimizer+params", [](PlanInput& c) {
      c.layout.stage = ZeroStage::kParameters;
      c.recompute = RecomputePolicy::full();
      c.offload = OffloadPolicy::kOptimizerAndParams;
    });
  // Tensor and pipeline parallelism on the same devices: the data-parallel degree shrinks to keep dp x tp x pp. A
  // run with sequence parallelism keeps it, so the sequence must divide by the new tp.
  for (int f = 2; in.layout.dp % f == 0; f *= 2) {
    int tp = in.layout.tp * f;
    const int kv = in.model.kv_head_count();
    if (tp <= in.hardware.devices_per_node && in.model.heads % tp == 0 && in.model.hidden % tp == 0 &&
        in.model.ffn_width() % tp == 0 && (kv % tp == 0 || tp % kv == 0) &&
        (!in.layout.sequence_parallel || in.model.seq % tp == 0))
      add(fmt::format("tensor parallelism --tp {} --dp {} (with --recompute)", tp, in.layout.dp / f),
          [tp, f](PlanInput& c) {
            c.layout.tp = tp;
            c.layout.dp /= f;
            if (c.layout.dp % c.layout.dp_replicate != 0) c.layout.dp_replicate = 1;
            c.recompute = RecomputePolicy::full();
          });
  }
  for (int f = 2; in.layout.dp % f == 0; f *= 2) {
    int pp = in.layout.pp * f;
    if (pp <= in.model.layers)
      add(fmt::format("pipeline parallelism --pp {} --dp {} (with --recompute)", pp, in.layout.dp / f),
          [pp, f](PlanInput& c) {
            c.layout.pp = pp;
            c.layout.dp /= f;
            if (c.layout.dp % c.layout.dp_replicate != 0) c.layout.dp_replicate = 1;
            c.recompute = RecomputePolicy::full();
          });
  }
  return changes;
}

RecomputePolicy choose_plan_recompute(const PlanInput& in) {
  const int n = stage_layers(in);
  std::vector<int> blocks;
  for (int l = 0; l < n; ++l) blocks.push_back(l);
  // The planner's arithmetic reads the first n layers: try the pattern over n, then repeat it on every stage.
  auto whole = [&](const RecomputePolicy& stage) {
    std::vector<BlockRecompute> layers(static_cast<std::size_t>(in.model.layers));
    for (int l = 0; l < in.model.layers; ++l) layers[static_cast<std::size_t>(l)] = stage.at(l % n);
    RecomputePolicy p = RecomputePolicy::of(layers);
    p.automatic = true;
    return p;
  };
  auto trial = [&](const RecomputePolicy& candidate, int) -> std::optional<RecomputeCost> {
    PlanInput c = in;
    c.recompute = whole(candidate);
    const MemoryPlan p = compute(c);
    if (!p.fits) return std::nullopt;
    const double gelu = static_cast<double>(in.model.ffn_width()) / in.layout.tp * in.model.seq * in.micro_batch;
    return RecomputeCost{p.recompute_flops,
                         2 * c.recompute.count(BlockRecompute::kOffload, n) *
                             activation_bytes_of(c, BlockRecompute::kOffload),
                         gelu * c.recompute.count(BlockRecompute::kMlp, n), p.total};
  };
  int failed = -1;
  const RecomputePolicy chosen = choose_recompute(n, {blocks}, every_block_recompute(), trial, &failed);
  return whole(failed >= 0 ? RecomputePolicy::full() : chosen);
}

MemoryPlan plan_memory(const PlanInput& in) {
  in.validate();
  MemoryPlan p = compute(in);
  if (p.fits) return p;
  for (const PlanChange& c : fit_changes(in)) {
    MemoryPlan q = compute(c.in);
    if (q.fits) {
      p.advice = fmt::format("{}: {:.1f} GB per device{}", c.what, q.total / 1e9,
                             q.host > 0 ? fmt::format(" and {:.1f} GB of host memory per device", q.host / 1e9) : "");
      return p;
    }
  }
  p.advice = "no single change tried fits: add devices (--dp, --tp, --pp) or memory";
  return p;
}

std::string MemoryPlan::table() const {
  const std::pair<const char*, double> rows[] = {
      {"parameters", params},    {"gradients", grads},        {"grad_shard (f32)", grad_shard},
      {"master (f32)", master},  {"adam m+v (f32)", optim_state}, {"unsharded+prefetch", unsharded},
      {"comm buffers", comm_buffers}, {"activations", activations}};
  std::string out = fmt::format("{:<20} {:>12} {:>18}\n", "category", "GB", "bytes");
  for (const auto& [name, bytes] : rows) out += fmt::format("{:<20} {:>12.2f} {:>18.0f}\n", name, bytes / 1e9, bytes);
  out += fmt::format("{:<20} {:>12.2f} {:>18.0f}\n", "total (device)", total / 1e9, total);
  if (host > 0) out += fmt::format("{:<20} {:>12.2f} {:>18.0f}\n", "host (offload)", host / 1e9, host);
  return out;
}

std::string MemoryPlan::json() const {
  nlohmann::json j{{"parameters", params}, {"gradients", grads},       {"grad_shard", grad_shard},
                   {"master", master},     {"optim_state", optim_state}, {"unsharded", unsharded},
                   {"comm_buffers", comm_buffers}, {"activations", activations}, {"host", host},
                   {"total", total},       {"fits", fits},             {"advice", advice},
                   {"step_compute_s", step_compute_s}, {"step_comm_s", step_comm_s},
                   {"recompute_flops", recompute_flops}};
  return j.dump();
}

LongestSeq longest_fitting_seq(PlanInput in) {
  LongestSeq r;
  r.step = 2 * in.layout.cp * 64;
  const int limit = 1 << 24;
  // The position table grows with the sequence when the parameters come from the dimensions; the memory is monotone
  // in seq either way, so a binary search over multiples of the step finds the largest that fits.
  auto fits = [&](int seq) {
    in.model.seq = seq;
    return plan_memory(in).fits;
  };
  if (!fits(r.step)) {
    in.model.seq = r.step;
    r.why = fmt::format("{:.1f} GB per device against {:.1f} GB", plan_memory(in).total / 1e9,
                        in.hardware.device_memory / 1e9);
    return r;
  }
  int lo = 1, hi = limit / r.step;  // lo * step fits
  if (fits(hi * r.step)) {
    r.seq = hi * r.step;
    r.capped = true;
    return r;
  }
  while (hi - lo > 1) {  // lo fits, hi does not
    const int mid = lo + (hi - lo) / 2;
    (fits(mid * r.step) ? lo : hi) = mid;
  }
  r.seq = lo * r.step;
  return r;
}

}  // namespace strata
