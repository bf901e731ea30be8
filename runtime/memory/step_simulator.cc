// StepSimulator: the cluster file, NCCL's collective costs, and one step of Strata's schedule priced out.
#include "runtime/memory/step_simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/json_schema.h"

namespace strata {

// ---- The cluster file --------------------------------------------------------------------------------------------

namespace {

#define STRATA_CLUSTER_CHECK(cond, origin, ...) \
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, cond, "cluster file {}: {}", origin, fmt::format(__VA_ARGS__))

constexpr std::size_t kMaxClusterFileBytes = 1 << 20;  // the shipped ones are under 2 KiB

// Every field of a cluster file, its type and range; anything else is refused (a misspelt optional field would
// otherwise be ignored without a word).
const JsonSchema& cluster_schema() {
  const JsonSchema rate = JsonSchema::number(0, 1e12, true);  // > 0
  const JsonSchema non_negative = JsonSchema::number(0, 1e12);
  const JsonSchema link = JsonSchema::object({required("bandwidth_gbs", rate), required("latency_us", non_negative)});
  static const JsonSchema s = JsonSchema::object({
      optional("name", JsonSchema::string(1024)),
      optional("notes", JsonSchema::string()),
      required("devices_per_node", JsonSchema::integer(1, 1 << 20)),
      required("peak_tflops", rate),
      required("gemm_efficiency", JsonSchema::number(0, 1, true)),
      required("hbm_bytes", JsonSchema::number(0, 1e18, true)),
      required("memory_bandwidth_gbs", rate),
      required("elementwise_bytes", non_negative),
      required("intra_node", link),
      required("inter_node", link),
      optional("cpu", JsonSchema::object({required("cores", JsonSchema::integer(1, 1 << 20)),
                                          required("thread_efficiency", JsonSchema::number(0, 1, true)),
                                          required("oversubscribed_latency_us", non_negative),
                                          optional("host_overhead_ms", non_negative)})),
  });
  return s;
}

LinkSpec link(const nlohmann::json& l) { return {l["bandwidth_gbs"].get<double>(), l["latency_us"].get<double>()}; }

}  // namespace

void ClusterSpec::validate() const {
  const std::string& o = origin;
  STRATA_CLUSTER_CHECK(devices_per_node >= 1, o, "devices_per_node {} must be at least 1", devices_per_node);
  auto positive = [&](double v, const char* what) {
    STRATA_CLUSTER_CHECK(std::isfinite(v) && v > 0, o, "{} must be a number > 0, got {}", what, v);
  };
  positive(peak_tflops, "peak_tflops");
  positive(hbm_bytes, "hbm_bytes");
  positive(memory_gbs, "memory_bandwidth_gbs");
  positive(intra.bandwidth_gbs, "intra_node.bandwidth_gbs");
  positive(inter.bandwidth_gbs, "inter_node.bandwidth_gbs");
  STRATA_CLUSTER_CHECK(std::isfinite(gemm_efficiency) && gemm_efficiency > 0 && gemm_efficiency <= 1, o,
                       "gemm_efficiency must be in (0, 1], got {}", gemm_efficiency);
  STRATA_CLUSTER_CHECK(std::isfinite(intra.latency_us) && intra.latency_us >= 0, o,
                       "intra_node.latency_us must be a number >= 0, got {}", intra.latency_us);
  STRATA_CLUSTER_CHECK(std::isfinite(inter.latency_us) && inter.latency_us >= 0, o,
                       "inter_node.latency_us must be a number >= 0, got {}", inter.latency_us);
  STRATA_CLUSTER_CHECK(std::isfinite(elementwise_bytes) && elementwise_bytes >= 0, o,
                       "elementwise_bytes must be a number >= 0, got {}", elementwise_bytes);
  STRATA_CLUSTER_CHECK(cores >= 0, o, "cpu.cores {} must be at least 1", cores);
  STRATA_CLUSTER_CHECK(std::isfinite(thread_efficiency) && thread_efficiency > 0 && thread_efficiency <= 1, o,
                       "cpu.thread_efficiency must be in (0, 1], got {}", thread_efficiency);
  STRATA_CLUSTER_CHECK(std::isfinite(oversubscribed_latency_us) && oversubscribed_latency_us >= 0, o,
                       "cpu.oversubscribed_latency_us must be a number >= 0, got {}", oversubscribed_latency_us);
  STRATA_CLUSTER_CHECK(std::isfinite(host_overhead_ms) && host_overhead_ms >= 0, o,
                       "cpu.host_overhead_ms must be a number >= 0, got {}", host_overhead_ms);
}

ClusterSpec parse_cluster(const std::string& json_text, const std::string& origin) {
  const std::string what = "cluster file " + origin;
  const nlohmann::json j = parse_json(json_text, what);
  cluster_schema().check(j, what);  // from here every field is present, of its type and in its range
  ClusterSpec c;
  c.origin = origin;
  c.name = j.value("name", origin);
  c.devices_per_node = j["devices_per_node"].get<int>();
  c.peak_tflops = j["peak_tflops"].get<double>();
  c.gemm_efficiency = j["gemm_efficiency"].get<double>();
  c.hbm_bytes = j["hbm_bytes"].get<double>();
  c.memory_gbs = j["memory_bandwidth_gbs"].get<double>();
  c.elementwise_bytes = j["elementwise_bytes"].get<double>();
  c.intra = link(j["intra_node"]);
  c.inter = link(j["inter_node"]);
  if (j.contains("cpu")) {
    const nlohmann::json& cpu = j["cpu"];
    c.cores = cpu["cores"].get<int>();
    c.thread_efficiency = cpu["thread_efficiency"].get<double>();
    c.oversubscribed_latency_us = cpu["oversubscribed_latency_us"].get<double>();
    c.host_overhead_ms = cpu.value("host_overhead_ms", 0.0);
  }
  c.validate();
  return c;
}

ClusterSpec load_cluster(const std::string& path) {
  // Through the checked input path: a FIFO, a device or a huge file is refused before anything is read.
  const std::string text = read_input_file(path, "cluster file", kMaxClusterFileBytes);
  return parse_cluster(text, path);
}

PipelineKind pipeline_kind_from_name(const std::string& name) {
  if (name == "gpipe") return PipelineKind::kGpipe;
  if (name == "1f1b") return PipelineKind::k1F1B;
  if (name == "interleaved") return PipelineKind::kInterleaved;
  STRATA_THROW(ErrorCode::kInvalidArgument, "--schedule {}: expected gpipe, 1f1b or interleaved", name);
}

const char* pipeline_kind_name(PipelineKind kind) {
  switch (kind) {
    case PipelineKind::kGpipe: return "gpipe";
    case PipelineKind::k1F1B: return "1f1b";
    case PipelineKind::kInterleaved: return "interleaved";
  }
  return "?";
}

void SimInput::validate() const {
  plan.validate();
  cluster.validate();
  const int P = plan.layout.pp;
  STRATA_CHECK(microbatches >= 0, "--microbatches {} must be >= 0 (0: one per pipeline stage)", microbatches);
  STRATA_CHECK(virtual_stages >= 1, "--virtual-stages {} must be at least 1", virtual_stages);
  STRATA_CHECK(virtual_stages == 1 || schedule == PipelineKind::kInterleaved,
               "--virtual-stages {} needs --schedule interleaved", virtual_stages);
  const int M = microbatches > 0 ? microbatches : P;
  STRATA_CHECK(P == 1 || schedule == PipelineKind::kGpipe || M >= P,
               "--microbatches {} must be at least --pp {} for the {} schedule", M, P, pipeline_kind_name(schedule));
  STRATA_CHECK(schedule != PipelineKind::kInterleaved || M % P == 0,
               "--microbatches {} must be a multiple of --pp {} for the interleaved schedule", M, P);
  STRATA_CHECK(static_cast<long>(P) * virtual_stages <= plan.model.layers,
               "--pp {} x --virtual-stages {} stages for --layers {}: each stage needs at least one layer", P,
               virtual_stages, plan.model.layers);
}

// ---- Collective costs --------------------------------------------------------------------------------------------

double ring_all_gather_s(double bytes, int n, const LinkSpec& link) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * link.latency_us * 1e-6 + (n - 1.0) / n * bytes / (link.bandwidth_gbs * 1e9);
}

double ring_reduce_scatter_s(double bytes, int n, const LinkSpec& link) { return ring_all_gather_s(bytes, n, link); }

double ring_all_reduce_s(double bytes, int n, const LinkSpec& link) { return 2 * ring_all_gather_s(bytes, n, link); }

double tree_all_reduce_s(double bytes, int n, const LinkSpec& link) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2 * std::log2(static_cast<double>(n)) * link.latency_us * 1e-6 +
         2 * bytes / (link.bandwidth_gbs * 1e9 * kTreeBandwidthFactor);
}

double all_reduce_s(double bytes, int n, const LinkSpec& link) {
  return std::min(ring_all_reduce_s(bytes, n, link), tree_all_reduce_s(bytes, n, link));
}

GroupLink group_link(const ClusterSpec& cluster, int stride, int size) {
  GroupLink g;
  const long per = cluster.devices_per_node;
  // Ranks stride apart: when stride >= a node, each on its own node; otherwise they fill the nodes they span, per /
  // stride a node.
  if (stride >= per) {
    g.nodes = size;
    g.per_node = 1;
  } else {
    g.nodes = static_cast<int>(static_cast<long>(stride) * (size - 1) / per + 1);
    g.per_node = g.nodes == 1 ? size : static_cast<int>(std::min<long>(size, per / std::max(1, stride)));
  }
  if (g.nodes == 1) {
    g.link = cluster.intra;
  } else {
    g.link.latency_us = cluster.inter.latency_us;
    g.link.bandwidth_gbs = std::min(cluster.intra.bandwidth_gbs, cluster.inter.bandwidth_gbs * g.per_node);
  }
  return g;
}

double bubble_fraction(PipelineKind kind, int stages, int microbatches, int virtual_stages) {
  const double P = stages, M = microbatches, V = kind == PipelineKind::kInterleaved ? virtual_stages : 1;
  if (stages <= 1) return 0;
  return (P - 1) / (V * M + P - 1);
}

double exposed_after_overlap(int units, double comm_per_unit, double compute_per_unit, bool overlaps) {
  if (units <= 0 || comm_per_unit <= 0) return 0;
  if (!overlaps) return units * comm_per_unit;
  return comm_per_unit + (units - 1) * std::max(0.0, comm_per_unit - compute_per_unit);
}

// ---- One step ----------------------------------------------------------------------------------------------------

namespace {

std::string describe(const GroupLink& g, int size) {
  if (size <= 1) return "-";
  return g.nodes == 1 ? fmt::format("intra x{}", size) : fmt::format("inter x{} ({} nodes)", size, g.nodes);
}

}  // namespace

StepPrediction simulate_step(const SimInput& input) {
  SimInput in = input;
  ClusterSpec& c = in.cluster;
  const ParallelLayout& L = in.plan.layout;
  const ModelShape& m = in.plan.model;
  const int T = L.tp, P = L.pp, R = L.dp_replicate, S = L.dp / L.dp_replicate;
  const long world = static_cast<long>(L.dp) * T * P;
  // The memory plan on this cluster's devices (its validation also covers the layout).
  in.plan.hardware.devices_per_node = c.devices_per_node;
  in.plan.hardware.nodes = static_cast<int>((world + c.devices_per_node - 1) / c.devices_per_node);
  in.plan.hardware.device_memory = c.hbm_bytes;
  in.validate();

  StepPrediction p;
  p.world = static_cast<int>(world);
  p.nodes = in.plan.hardware.nodes;
  const int M = in.microbatches > 0 ? in.microbatches : P;
  const int V = in.schedule == PipelineKind::kInterleaved ? in.virtual_stages : 1;
  p.microbatches = M;

  // Per-rank rates. On a CPU machine the ranks of a node share its cores: a rank runs cores / ranks threads (at
  // least one), and when ranks outnumber cores they take turns, so each gets cores / ranks of a core.
  double share = 1;
  if (c.cores > 0) {
    const int ranks = static_cast<int>(std::min<long>(world, c.devices_per_node));
    const int threads = std::max(1, c.cores / ranks);
    share = std::min(static_cast<double>(threads), static_cast<double>(c.cores) / ranks);
    if (threads > 1) share *= c.thread_efficiency;
    if (ranks > c.cores) c.intra.latency_us += c.oversubscribed_latency_us;
    // The host's own work is serial: more threads do not speed it up, and a rank with part of a core waits longer.
    p.host_s = c.host_overhead_ms * 1e-3 * std::max(1.0, static_cast<double>(ranks) / c.cores);
  }
  const double flop_rate = c.peak_tflops * 1e12 * c.gemm_efficiency * share;
  const double mem_rate = c.memory_gbs * 1e9 * share;
  // Where the collectives' copies and reductions run on the cores that compute (CPU), nothing overlaps.
  const bool overlaps = c.cores == 0;

  const double h = m.hidden, s = m.seq, V_vocab = m.vocab;
  const double psz = static_cast<double>(dtype_size(in.plan.precision.param_dtype));
  const double rsz = static_cast<double>(dtype_size(in.plan.precision.reduce_dtype));
  const double tokens_mb = static_cast<double>(in.plan.micro_batch) * m.seq;  // per rank and micro-batch
  const double layers_stage = static_cast<double>(m.layers) / P;
  const int units = std::max(1, static_cast<int>(std::lround(layers_stage)));

  // Compute of one layer for one micro-batch on this rank: forward a third of the matrix-product FLOPs (6 x params
  // + 12 h s per token, fwd + bwd), backward two thirds, plus a forward again under recomputation; elementwise
  // traffic at memory bandwidth, split the same way.
  // With --params given (a model not shaped like ours, e.g. Llama's SwiGLU and untied head), the blocks carry what the
  // embeddings do not, so the step's FLOPs stay 6 N + 12 L h s per token.
  // From the dimensions, a block is ModelShape's count of one layer (12 h^2 + 13 h for a GPT-2 block), and the
  // attention's 12 h s is 12 q s, q = heads x head_dim.
  const double block_params =
      m.params > 0 ? std::max(0.0, (m.params - (V_vocab + s) * h) / m.layers) : m.layer_per_rank(1);
  const double q = m.q_width();
  const double layer_flops = (6 * block_params + 12 * q * s) * tokens_mb / T;
  // Attention that holds the s x s scores (no tiling) also streams them: about kScoreBytes per token, head and key.
  const double score_bytes = in.plan.tiled_attention ? 0.0 : kScoreBytes * m.heads * s;
  const double layer_mem = (c.elementwise_bytes * h + score_bytes) * tokens_mb / T;
  const double layer_s = layer_flops / flop_rate + layer_mem / mem_rate;
  const double c_f = layer_s / 3, c_b = 2 * layer_s / 3 + recompute_forward_fraction(in.plan) * layer_s / 3;
  const double head_s = 6 * V_vocab * h * tokens_mb / T / flop_rate;  // the tied LM head on the last stage

  // Tensor parallelism: each layer all-reduces its activations twice forward and twice backward (a reduce-scatter
  // and an all-gather of the same bytes under sequence parallelism), again under recomputation. On the critical path.
  const GroupLink tp_g = group_link(c, 1, T);
  const double act_bytes = tokens_mb * h * psz;
  const double tp_one =
      L.sequence_parallel ? 2 * ring_all_gather_s(act_bytes, T, tp_g.link) : all_reduce_s(act_bytes, T, tp_g.link);
  const int stage_n = std::max(1, m.layers / std::max(1, P));  // the planner's first stage
  const double full_share = static_cast<double>(in.plan.recompute.count(BlockRecompute::kFull, stage_n)) / stage_n;
  const double tp_layer = (4 + 2 * full_share) * tp_one;

  // Pipeline: one activation forward and one gradient backward per micro-batch and chunk boundary.
  const GroupLink pp_g = group_link(c, T * S * R, P);
  const double p2p_bytes = act_bytes / (L.sequence_parallel ? T : 1);
  const double p2p = P > 1 ? 2 * V * (pp_g.link.latency_us * 1e-6 + p2p_bytes / (pp_g.link.bandwidth_gbs * 1e9)) : 0;

  // One micro-batch's slot on the busiest stage, and the pipeline around it.
  const double slot = layers_stage * (c_f + c_b + tp_layer) + head_s + p2p;
  const double busy = M * slot;
  const double frac = bubble_fraction(in.schedule, P, M, V);
  p.bubble_s = frac > 0 ? busy * frac / (1 - frac) : 0;

  // Data parallelism, per unit of this stage (a transformer block, this rank's tensor slice) and the embeddings unit
  // (first and last stage). ZeRO-3 gathers a unit before its forward and, when a step is one micro-batch without a
  // pipeline, again before its backward (it reshards after forward); otherwise it stays gathered through the step.
  // Gradients are reduce-scattered once per unit, right after its last backward (then all-reduced across replicas
  // under hybrid sharding); ZeRO-0 all-reduces them over the whole data-parallel group instead.
  const GroupLink shard_g = group_link(c, T, S), rep_g = group_link(c, T * S, R), dp_g = group_link(c, T, L.dp);
  const double layer_params = m.layer_per_rank(T);
  const double embed_params = m.embedding_per_rank(T);
  auto gather = [&](double params) { return ring_all_gather_s(params * psz, S, shard_g.link); };
  auto reduce = [&](double params) {
    if (L.stage == ZeroStage::kNone) return all_reduce_s(params * rsz, L.dp, dp_g.link);
    return ring_reduce_scatter_s(params * rsz, S, shard_g.link) + all_reduce_s(params * rsz / S, R, rep_g.link);
  };
  const bool zero3 = L.stage == ZeroStage::kParameters;
  const bool regather = zero3 && P == 1 && M == 1;
  const double g = zero3 ? gather(layer_params) : 0, g_emb = zero3 ? gather(embed_params) : 0;
  const double r = L.dp > 1 ? reduce(layer_params) : 0, r_emb = L.dp > 1 ? reduce(embed_params) : 0;
  // Forward of the first micro-batch: the embeddings' gather, then each block's behind the previous block's compute
  // (prefetch). Backward of the last: the gather stream and the reduce stream share the links, so a unit's regather
  // and the previous unit's reduction together hide behind one unit's backward; the last reductions are exposed.
  const bool prefetch = overlaps && in.plan.prefetch_depth > 0;
  const double fwd_exposed = g_emb + exposed_after_overlap(units, g, c_f + tp_layer, prefetch);
  // Without prefetch the regathers wait in full, and only the reductions overlap.
  const double g_back = regather ? g : 0;
  const double bwd_exposed = (prefetch ? exposed_after_overlap(units, g_back + r, c_b + tp_layer, true)
                                       : units * g_back + exposed_after_overlap(units, r, c_b + tp_layer, overlaps)) +
                             r_emb;
  // ZeRO-1/2 gather the updated parameters after the optimizer step: nothing left to hide behind.
  const double stage_params = m.count_per_rank(T) / P;
  const bool zero12 = L.stage == ZeroStage::kOptimizerState || L.stage == ZeroStage::kGradients;
  const double post_gather = zero12 ? ring_all_gather_s(stage_params * psz, S, shard_g.link) : 0;
  p.dp_comm_s = units * ((regather ? 2 : 1) * g + r) + g_emb + r_emb + post_gather;
  p.tp_comm_s = M * layers_stage * tp_layer;
  p.pp_comm_s = M * p2p;

  // The optimizer step streams the shard: f32 master, m, v read and written, the f32 gradient read, the parameter
  // written in its own dtype. Offloaded, the f32 gradient shard goes to the host and the parameters come back over
  // the host link instead (the host's own AdamW is not priced).
  const double shard = stage_params / (L.stage == ZeroStage::kNone ? 1.0 : static_cast<double>(S));
  p.optimizer_s = in.plan.offload == OffloadPolicy::kNone ? shard * (28 + psz) / mem_rate
                                                          : shard * (4 + psz) / (in.plan.hardware.pcie_gbs * 1e9);

  p.compute_s = M * (layers_stage * (c_f + c_b) + head_s);
  p.comm_s = p.dp_comm_s + p.tp_comm_s + p.pp_comm_s;
  const double dp_exposed = fwd_exposed + bwd_exposed + post_gather;
  p.exposed_comm_s = p.tp_comm_s + p.pp_comm_s + dp_exposed;
  p.step_s = busy + p.bubble_s + dp_exposed + p.optimizer_s + p.host_s;

  p.tokens_per_step = tokens_mb * M * L.dp;
  p.tokens_per_s = p.tokens_per_step / p.step_s;
  p.tokens_per_s_per_device = p.tokens_per_s / world;
  const double model_flops_per_token = 6 * m.count() + 12.0 * m.layers * q * s;
  p.model_tflops_per_device = model_flops_per_token * p.tokens_per_s_per_device / 1e12;
  // Peak of the job: every device's, or on CPU machines every core's.
  const double peak =
      c.cores > 0 ? static_cast<double>(p.nodes) * c.cores * c.peak_tflops : static_cast<double>(world) * c.peak_tflops;
  p.mfu = model_flops_per_token * p.tokens_per_s / (peak * 1e12);

  const MemoryPlan mem = plan_memory(in.plan);
  p.memory_bytes = mem.total;
  p.fits = mem.fits;
  p.dp_link = describe(L.stage == ZeroStage::kNone ? dp_g : shard_g, L.stage == ZeroStage::kNone ? L.dp : S);
  if (R > 1 && L.stage != ZeroStage::kNone) p.dp_link += " + replicas " + describe(rep_g, R);
  p.tp_link = describe(tp_g, T);
  p.pp_link = describe(pp_g, P);
  return p;
}

std::string StepPrediction::table() const {
  std::string out = fmt::format("{:<26} {:>14}\n", "quantity", "value");
  auto ms = [&](const char* name, double v) { out += fmt::format("{:<26} {:>14.3f}\n", name, v * 1e3); };
  ms("step (ms)", step_s);
  ms("  compute (ms)", compute_s);
  ms("  exposed comm (ms)", exposed_comm_s);
  ms("  pipeline bubble (ms)", bubble_s);
  ms("  optimizer (ms)", optimizer_s);
  if (host_s > 0) ms("  host overhead (ms)", host_s);
  ms("comm, all (ms)", comm_s);
  ms("  data-parallel (ms)", dp_comm_s);
  ms("  tensor-parallel (ms)", tp_comm_s);
  ms("  pipeline p2p (ms)", pp_comm_s);
  out += fmt::format("{:<26} {:>14.0f}\n", "tokens/step", tokens_per_step);
  out += fmt::format("{:<26} {:>14.1f}\n", "tokens/s", tokens_per_s);
  out += fmt::format("{:<26} {:>14.1f}\n", "tokens/s per device", tokens_per_s_per_device);
  out += fmt::format("{:<26} {:>14.2f}\n", "model TFLOP/s per device", model_tflops_per_device);
  out += fmt::format("{:<26} {:>13.1f}%\n", "MFU", mfu * 100);
  out += fmt::format("{:<26} {:>14.2f}\n", "memory per device (GB)", memory_bytes / 1e9);
  out += fmt::format("links: dp {}, tp {}, pp {}; {} devices on {} nodes, {} micro-batches\n", dp_link, tp_link,
                     pp_link, world, nodes, microbatches);
  return out;
}

std::string StepPrediction::json() const {
  nlohmann::json j{{"world", world},
                   {"nodes", nodes},
                   {"microbatches", microbatches},
                   {"step_s", step_s},
                   {"compute_s", compute_s},
                   {"comm_s", comm_s},
                   {"exposed_comm_s", exposed_comm_s},
                   {"bubble_s", bubble_s},
                   {"optimizer_s", optimizer_s},
                   {"host_s", host_s},
                   {"dp_comm_s", dp_comm_s},
                   {"tp_comm_s", tp_comm_s},
                   {"pp_comm_s", pp_comm_s},
                   {"tokens_per_step", tokens_per_step},
                   {"tokens_per_s", tokens_per_s},
                   {"tokens_per_s_per_device", tokens_per_s_per_device},
                   {"model_tflops_per_device", model_tflops_per_device},
                   {"mfu", mfu},
                   {"memory_bytes", memory_bytes},
                   {"fits", fits},
                   {"dp_link", dp_link},
                   {"tp_link", tp_link},
                   {"pp_link", pp_link}};
  return j.dump();
}

}  // namespace strata
