// StepSimulator: predicts one training step's time (compute, communication, what of it is exposed, the pipeline
// bubble), tokens/s, MFU and memory per device for a model, a layout and a cluster description, following the way
// Strata schedules a step. The model and how it was calibrated are in docs/scaling.md ("The simulator").
#pragma once

#include <string>

#include "runtime/memory/memory_planner.h"

namespace strata {

// One kind of link as a collective sees it from one device: the bus bandwidth NCCL's ring reaches (GB/s, 1e9 bytes)
// and the latency of one ring step (microseconds).
struct LinkSpec {
  double bandwidth_gbs = 0;
  double latency_us = 0;
};

// A cluster description (tools/clusters/*.json). Rates are per device; a CPU machine (cpu.cores > 0) is one node
// whose cores the ranks on it share, and `peak_tflops` is then per core.
struct ClusterSpec {
  std::string name;
  std::string origin;            // the file it came from (for messages)
  int devices_per_node = 8;      // GPUs per node; on a CPU machine, the most ranks one node runs
  double peak_tflops = 0;        // dense peak in the precision the trainer computes in
  double gemm_efficiency = 0;    // fraction of peak the model's matrix products reach
  double hbm_bytes = 0;          // device memory
  double memory_gbs = 0;         // device memory bandwidth: elementwise work and the optimizer step
  double elementwise_bytes = 0;  // bytes of non-GEMM traffic per token, layer and hidden unit, forward + backward
  LinkSpec intra;                // within a node (NVLink; shared memory on a CPU machine)
  LinkSpec inter;                // across nodes, per device (its NIC)
  int cores = 0;                 // CPU machines: cores per node (0: a GPU cluster)
  double thread_efficiency = 1;  // CPU: speed of one rank on k > 1 threads over k ranks of one thread
  double oversubscribed_latency_us = 0;  // CPU: added to every ring step when ranks outnumber cores (a peer waits
                                         // to be scheduled)
  // CPU, optional (default 0): a rank's host time per step outside its kernels and collectives (the training loop,
  // dispatch and bookkeeping), run on one thread, so it takes ranks / cores times as long when ranks outnumber cores.
  // Fixed per step, it dominates small models, whose kernels are short.
  double host_overhead_ms = 0;
  // kInvalidArgument naming the field and the file: a count < 1, a rate or size <= 0, an efficiency outside (0, 1].
  void validate() const;
};

// Reads and validates a cluster file. Errors name the file and the missing or bad field.
ClusterSpec load_cluster(const std::string& path);
ClusterSpec parse_cluster(const std::string& json_text, const std::string& origin);

enum class PipelineKind { kGpipe, k1F1B, kInterleaved };
PipelineKind pipeline_kind_from_name(const std::string& name);  // gpipe, 1f1b, interleaved
const char* pipeline_kind_name(PipelineKind kind);

struct SimInput {
  PlanInput plan;  // model, layout (dp_replicate for hybrid), precision, micro_batch, recompute, prefetch depth
  ClusterSpec cluster;
  PipelineKind schedule = PipelineKind::k1F1B;
  int microbatches = 0;    // per step and data-parallel rank; 0: pp (1 without a pipeline)
  int virtual_stages = 1;  // interleaved only
  void validate() const;
};

// ---- The cost model's pieces (pure functions, tested one by one) ------------------------------------------------

// NCCL's ring: alpha (n - 1) + (n - 1) / n * bytes / busbw, `bytes` the whole (gathered or input) buffer. 0 for n = 1.
double ring_all_gather_s(double bytes, int n, const LinkSpec& link);
double ring_reduce_scatter_s(double bytes, int n, const LinkSpec& link);
double ring_all_reduce_s(double bytes, int n, const LinkSpec& link);  // twice the above
// The double binary tree: 2 log2(n) alpha + 2 bytes / (busbw * kTreeBandwidthFactor).
double tree_all_reduce_s(double bytes, int n, const LinkSpec& link);
// What NCCL's tuner picks: the faster of ring and tree.
double all_reduce_s(double bytes, int n, const LinkSpec& link);
inline constexpr double kTreeBandwidthFactor = 0.5;

// A group of `size` ranks, `stride` apart, starting at rank 0 (the mesh's rank = ((pp R + r) S + s) T + t): the link
// its collectives run over. Within one node: `intra`. Spanning nodes: the inter-node latency, and a bus bandwidth of
// the group's ranks per node times one device's NIC (NCCL runs one ring channel per NIC), at most `intra`.
struct GroupLink {
  int nodes = 1;     // nodes the group spans
  int per_node = 1;  // its ranks on each node
  LinkSpec link;
};
GroupLink group_link(const ClusterSpec& cluster, int stride, int size);

// Share of a step the pipeline stands idle: (P - 1) / (M + P - 1) for GPipe and 1F1B, (P - 1) / (V M + P - 1)
// interleaved (each of the V chunks is 1 / V of a micro-batch's work).
double bubble_fraction(PipelineKind kind, int stages, int microbatches, int virtual_stages);

// Communication issued one unit at a time on its own stream while units compute: the first is exposed, and each later
// one overlaps the previous unit's compute, so exposed = comm + (units - 1) max(0, comm - compute). Without prefetch
// (or where the communication runs on the compute's own cores) nothing overlaps: units x comm.
double exposed_after_overlap(int units, double comm_per_unit, double compute_per_unit, bool overlaps);

// Bytes moved per token, head and key position when attention materialises its s x s scores (16-bit): written and
// softmaxed forward, its dropout mask and output, read and differentiated backward, about three passes over the
// 5 a s^2 b bytes Korthikanti et al. count as stored.
inline constexpr double kScoreBytes = 15;

// ---- The prediction ---------------------------------------------------------------------------------------------

struct StepPrediction {
  int world = 1, nodes = 1, microbatches = 1;
  double step_s = 0;
  double compute_s = 0;       // matrix products and elementwise work on the busiest rank (bubble excluded)
  double comm_s = 0;          // every collective's and transfer's duration (data-parallel, tp, pipeline)
  double exposed_comm_s = 0;  // what of comm_s the step waits for
  double bubble_s = 0;        // pipeline idle
  double optimizer_s = 0;     // the optimizer step over the shard
  double host_s = 0;          // the host's own work per step (CPU machines: cpu.host_overhead_ms)
  double dp_comm_s = 0, tp_comm_s = 0, pp_comm_s = 0;  // comm_s by kind
  double tokens_per_step = 0;                          // the job's
  double tokens_per_s = 0, tokens_per_s_per_device = 0;
  double model_tflops_per_device = 0;  // (6 N + 12 L h s) per token, achieved
  double mfu = 0;
  double memory_bytes = 0;  // plan_memory's device total
  bool fits = false;
  std::string dp_link, tp_link, pp_link;  // "intra" / "inter (k nodes)" / "-"
  std::string table() const;
  std::string json() const;
};

StepPrediction simulate_step(const SimInput& in);

}  // namespace strata
