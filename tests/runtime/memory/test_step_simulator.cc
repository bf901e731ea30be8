// StepSimulator tests: NCCL's ring and tree costs, group placement on nodes, the bubble, the overlap rule and a whole
// step against hand-computed values; cluster files that are wrong fail naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "runtime/memory/step_simulator.h"

namespace strata {
namespace {

const LinkSpec kLink{100, 10};  // 100 GB/s, 10 us a ring step

// Sums taken in another order than the simulator's: equal to a few ulps.
#define EXPECT_CLOSE(a, b) EXPECT_NEAR((a), (b), 1e-12 * std::abs(b))

TEST(StepSimulator, RingCollectivesFollowAlphaBeta) {
  // 7 steps of 10 us, then 7/8 of 8 GB at 100 GB/s.
  EXPECT_DOUBLE_EQ(ring_all_gather_s(8e9, 8, kLink), 7 * 10e-6 + 0.07);
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_s(8e9, 8, kLink), 7 * 10e-6 + 0.07);
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(8e9, 8, kLink), 2 * (7 * 10e-6 + 0.07));
  EXPECT_EQ(ring_all_gather_s(8e9, 1, kLink), 0);  // nothing to move within one rank
  EXPECT_EQ(ring_all_reduce_s(0, 8, kLink), 0);
}

TEST(StepSimulator, AllReducePicksTreeForSmallMessagesOnManyRanks) {
  const LinkSpec link{10, 5};
  // 1 MB over 16 ranks: ring 2 (15 x 5 us + 15/16 x 1e6 / 1e10) = 337.5 us; tree 2 x 4 x 5 us + 2e6 / 5e9 = 440 us.
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(1e6, 16, link), 2 * (15 * 5e-6 + 15.0 / 16 * 1e6 / 1e10));
  EXPECT_DOUBLE_EQ(tree_all_reduce_s(1e6, 16, link), 2 * 4 * 5e-6 + 2 * 1e6 / (1e10 * kTreeBandwidthFactor));
  EXPECT_DOUBLE_EQ(all_reduce_s(1e6, 16, link), ring_all_reduce_s(1e6, 16, link));
  // 1 kB over 64 ranks: the ring's 126 latencies lose to the tree's 12.
  EXPECT_DOUBLE_EQ(all_reduce_s(1e3, 64, link), tree_all_reduce_s(1e3, 64, link));
  EXPECT_LT(tree_all_reduce_s(1e3, 64, link), ring_all_reduce_s(1e3, 64, link));
}

ClusterSpec two_level() {
  ClusterSpec c;
  c.origin = "test";
  c.devices_per_node = 8;
  c.peak_tflops = 1;
  c.gemm_efficiency = 0.5;
  c.hbm_bytes = 80e9;
  c.memory_gbs = 1;
  c.intra = {300, 2};
  c.inter = {25, 10};
  return c;
}

TEST(StepSimulator, GroupsSpanNodesAsTheMeshLaysThemOut) {
  const ClusterSpec c = two_level();
  GroupLink tp = group_link(c, 1, 8);  // tp innermost: one node
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.link.bandwidth_gbs, 300);
  EXPECT_EQ(tp.link.latency_us, 2);
  GroupLink dp = group_link(c, 8, 4);  // dp behind tp 8: one rank a node, one NIC each
  EXPECT_EQ(dp.nodes, 4);
  EXPECT_EQ(dp.per_node, 1);
  EXPECT_EQ(dp.link.bandwidth_gbs, 25);
  EXPECT_EQ(dp.link.latency_us, 10);
  GroupLink full = group_link(c, 1, 32);  // 8 ranks a node: 8 NICs, capped by the intra-node bandwidth
  EXPECT_EQ(full.nodes, 4);
  EXPECT_EQ(full.per_node, 8);
  EXPECT_EQ(full.link.bandwidth_gbs, 200);
  GroupLink stages = group_link(c, 32, 12);  // pipeline stages 4 nodes apart: 12 nodes, not the 45 they span
  EXPECT_EQ(stages.nodes, 12);
  EXPECT_EQ(stages.per_node, 1);
  EXPECT_EQ(group_link(c, 1, 1).nodes, 1);
  GroupLink strided = group_link(c, 2, 16);  // tp 2: 4 of the group a node
  EXPECT_EQ(strided.nodes, 4);
  EXPECT_EQ(strided.per_node, 4);
  EXPECT_EQ(strided.link.bandwidth_gbs, 100);
}

TEST(StepSimulator, BubbleFraction) {
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineKind::k1F1B, 4, 8, 1), 3.0 / 11);
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineKind::kGpipe, 4, 8, 1), 3.0 / 11);
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineKind::kInterleaved, 4, 8, 2), 3.0 / 19);
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineKind::k1F1B, 4, 8, 2), 3.0 / 11);  // V only counts interleaved
  EXPECT_EQ(bubble_fraction(PipelineKind::k1F1B, 1, 8, 1), 0);
}

TEST(StepSimulator, ExposedIsWhatComputeCannotHide) {
  EXPECT_DOUBLE_EQ(exposed_after_overlap(10, 2, 3, true), 2);          // only the first
  EXPECT_DOUBLE_EQ(exposed_after_overlap(10, 5, 3, true), 5 + 9 * 2);  // first + (units - 1)(comm - compute)
  EXPECT_DOUBLE_EQ(exposed_after_overlap(10, 5, 3, false), 50);        // nothing overlaps
  EXPECT_EQ(exposed_after_overlap(0, 5, 3, true), 0);
  EXPECT_EQ(exposed_after_overlap(10, 0, 3, true), 0);
}

SimInput small_model() {
  SimInput in;
  in.plan.model.layers = 2;
  in.plan.model.hidden = 64;
  in.plan.model.heads = 1;
  in.plan.model.vocab = 0;
  in.plan.model.seq = 16;
  in.plan.micro_batch = 1;
  in.plan.precision = {DType::kF32, DType::kF32};
  in.cluster = two_level();
  return in;
}

TEST(StepSimulator, OneDeviceStepByHand) {
  const SimInput in = small_model();
  const StepPrediction p = simulate_step(in);
  // Per layer and micro-batch of 16 tokens: (6 (12 h^2 + 13 h) + 12 h s) x 16 = 4 995 072 FLOPs at 0.5 TFLOP/s.
  const double layer_s = 4995072.0 / 0.5e12;
  EXPECT_CLOSE(p.compute_s, 2 * layer_s);
  // Optimizer: 2 (12 h^2 + 13 h) + 16 h + 2 h = 101 120 parameters, 32 bytes each, at 1 GB/s.
  EXPECT_DOUBLE_EQ(p.optimizer_s, 101120.0 * 32 / 1e9);
  EXPECT_CLOSE(p.step_s, p.compute_s + p.optimizer_s);
  EXPECT_EQ(p.comm_s, 0);
  EXPECT_EQ(p.exposed_comm_s, 0);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 16 / p.step_s);
  // MFU: (6 N + 12 L h s) per token over the 1 TFLOP/s peak.
  EXPECT_CLOSE(p.mfu, (6 * 101120.0 + 12 * 2 * 64 * 16) * 16 / p.step_s / 1e12);
}

TEST(StepSimulator, ZeroThreeGathersHideBehindCompute) {
  SimInput in = small_model();
  in.plan.layout.dp = 2;
  in.cluster.gemm_efficiency = 1e-3;  // slow compute: every gather hides behind a layer
  const StepPrediction p = simulate_step(in);
  const LinkSpec link = in.cluster.intra;
  const double layer = 12 * 64 * 64 + 13 * 64, embed = 16 * 64;
  const double g = ring_all_gather_s(layer * 4, 2, link), g_emb = ring_all_gather_s(embed * 4, 2, link);
  const double r = ring_reduce_scatter_s(layer * 4, 2, link), r_emb = ring_reduce_scatter_s(embed * 4, 2, link);
  // Gathered before the forward and again before the backward, reduced once, per unit; 2 blocks + the embeddings.
  EXPECT_CLOSE(p.dp_comm_s, 2 * (2 * g + r) + g_emb + r_emb);
  // Exposed: the embeddings' and the first block's gather forward; backward, the first regather with its
  // reduction, and the embeddings' reduction.
  EXPECT_CLOSE(p.exposed_comm_s, g_emb + g + (g + r) + r_emb);
  EXPECT_CLOSE(p.step_s, p.compute_s + p.exposed_comm_s + p.optimizer_s);
  // Without prefetch every gather waits in full; the reductions still overlap but the embeddings' and the last.
  in.plan.prefetch_depth = 0;
  const StepPrediction q = simulate_step(in);
  EXPECT_CLOSE(q.exposed_comm_s, g_emb + 2 * g + 2 * g + r + r_emb);
}

TEST(StepSimulator, PipelineStepIsBusyPlusBubble) {
  SimInput in = small_model();
  in.plan.model.layers = 4;
  in.plan.layout.pp = 2;
  in.microbatches = 6;
  const StepPrediction p = simulate_step(in);
  const double busy = p.compute_s + p.pp_comm_s;  // no tp, no data parallelism
  EXPECT_CLOSE(p.bubble_s / (busy + p.bubble_s), bubble_fraction(PipelineKind::k1F1B, 2, 6, 1));
  EXPECT_CLOSE(p.step_s, busy + p.bubble_s + p.optimizer_s);
  EXPECT_DOUBLE_EQ(p.tokens_per_step, 16.0 * 6);
}

TEST(StepSimulator, HostOverheadIsSerialPerRankAndStep) {
  SimInput in = small_model();
  in.cluster.cores = 2;
  in.cluster.thread_efficiency = 1;
  in.cluster.host_overhead_ms = 5;
  // One rank on 2 cores: its 2 threads double the compute rate but not the host's 5 ms.
  const StepPrediction one = simulate_step(in);
  EXPECT_DOUBLE_EQ(one.host_s, 0.005);
  const double layer_s = 4995072.0 / (0.5e12 * 2);  // OneDeviceStepByHand's layer on 2 threads
  EXPECT_CLOSE(one.step_s, 2 * layer_s + 101120.0 * 32 / 2e9 + 0.005);
  // 4 ranks on 2 cores: each has half a core, so its 5 ms of host work take 10 ms; the rest is unchanged.
  in.plan.layout.dp = 4;
  const StepPrediction four = simulate_step(in);
  EXPECT_DOUBLE_EQ(four.host_s, 0.010);
  in.cluster.host_overhead_ms = 0;
  const StepPrediction none = simulate_step(in);
  EXPECT_EQ(none.host_s, 0);
  EXPECT_CLOSE(four.step_s, none.step_s + 0.010);
  // A GPU cluster (no cpu section) has none.
  in.cluster.cores = 0;
  in.cluster.host_overhead_ms = 5;
  EXPECT_EQ(simulate_step(in).host_s, 0);
}

// parse_cluster's message for `text`, or "" when it parses.
std::string cluster_error(const std::string& text) {
  try {
    parse_cluster(text, "tools/clusters/bad.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

const char* kGood = R"({"devices_per_node": 8, "peak_tflops": 989, "gemm_efficiency": 0.5, "hbm_bytes": 80e9,
  "memory_bandwidth_gbs": 3350, "elementwise_bytes": 100, "intra_node": {"bandwidth_gbs": 360, "latency_us": 3},
  "inter_node": {"bandwidth_gbs": 45, "latency_us": 8}})";

std::string with(const std::string& from, const std::string& to) {
  std::string text = kGood;
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(StepSimulator, ClusterFileErrorsNameTheFieldAndTheFile) {
  EXPECT_EQ(cluster_error(kGood), "");
  const ClusterSpec c = parse_cluster(kGood, "x");
  EXPECT_EQ(c.inter.bandwidth_gbs, 45);
  EXPECT_EQ(c.cores, 0);

  std::string e = cluster_error(with(R"("peak_tflops": 989, )", ""));
  EXPECT_NE(e.find("tools/clusters/bad.json"), std::string::npos) << e;
  EXPECT_NE(e.find(".peak_tflops: missing"), std::string::npos) << e;

  e = cluster_error(with(R"("bandwidth_gbs": 360)", R"("bandwidth_gbs": -5)"));
  EXPECT_NE(e.find("tools/clusters/bad.json"), std::string::npos) << e;
  EXPECT_NE(e.find(".intra_node.bandwidth_gbs: expected a number in (0, 1000000000000], got -5"), std::string::npos)
      << e;

  e = cluster_error(with(R"(, "latency_us": 8)", ""));
  EXPECT_NE(e.find(".inter_node.latency_us: missing"), std::string::npos) << e;

  e = cluster_error(with(R"("gemm_efficiency": 0.5)", R"("gemm_efficiency": "high")"));
  EXPECT_NE(e.find(".gemm_efficiency: expected a number, got a string \"high\""), std::string::npos) << e;

  e = cluster_error(with(R"("gemm_efficiency": 0.5)", R"("gemm_efficiency": 1.5)"));
  EXPECT_NE(e.find(".gemm_efficiency: expected a number in (0, 1], got 1.5"), std::string::npos) << e;

  e = cluster_error(with(R"("devices_per_node": 8)", R"("devices_per_node": 0)"));
  EXPECT_NE(e.find(".devices_per_node: expected an integer in [1, 2^20], got 0"), std::string::npos) << e;

  e = cluster_error(with(R"("hbm_bytes": 80e9,)", R"("hbm_bytes": 80e9, "cpu": {"cores": 2},)"));
  EXPECT_NE(e.find(".cpu.thread_efficiency: missing"), std::string::npos) << e;

  // cpu.host_overhead_ms is optional: 0 when absent.
  auto with_cpu = [](const std::string& extra) {
    return with(R"("hbm_bytes": 80e9,)",
                R"("hbm_bytes": 80e9, "cpu": {"cores": 2, "thread_efficiency": 0.8, "oversubscribed_latency_us": 100)" +
                    extra + "},");
  };
  EXPECT_EQ(parse_cluster(with_cpu(""), "x").host_overhead_ms, 0);
  EXPECT_EQ(parse_cluster(with_cpu(R"(, "host_overhead_ms": 7)"), "x").host_overhead_ms, 7);
  e = cluster_error(with_cpu(R"(, "host_overhead_ms": -1)"));
  EXPECT_NE(e.find(".cpu.host_overhead_ms: expected a number in [0, 1000000000000], got -1"), std::string::npos) << e;

  e = cluster_error("{\"devices_per_node\": 8,");
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

  // Hardening 2: a name that is a number, an integer past 2^32 (once read modulo 2^32, as 8), an unknown key (a
  // misspelt optional field), a fraction where a count goes.
  e = cluster_error(with(R"("devices_per_node": 8)", R"("name": 7, "devices_per_node": 8)"));
  EXPECT_NE(e.find("tools/clusters/bad.json: .name: expected a string, got an integer 7"), std::string::npos) << e;
  e = cluster_error(with(R"("devices_per_node": 8)", R"("devices_per_node": 4294967304)"));
  EXPECT_NE(e.find(".devices_per_node: expected an integer in [1, 2^20], got 4294967304"), std::string::npos) << e;
  e = cluster_error(with_cpu(R"(, "host_overhead_msec": 7)"));
  EXPECT_NE(e.find(".cpu.host_overhead_msec: unknown key (known here: cores, thread_efficiency, "
                   "oversubscribed_latency_us, host_overhead_ms)"), std::string::npos) << e;
  e = cluster_error(with(R"("devices_per_node": 8)", R"("devices_per_node": 8.5)"));
  EXPECT_NE(e.find(".devices_per_node: expected an integer in [1, 2^20], got 8.5"), std::string::npos) << e;
  EXPECT_EQ(parse_cluster(with(R"("devices_per_node": 8)", R"("devices_per_node": 8e0)"), "x").devices_per_node, 8);
}

TEST(StepSimulator, MissingClusterFileIsAnIoError) {
  try {
    load_cluster("/nonexistent/cluster.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/cluster.json"), std::string::npos) << e.what();
  }
}

TEST(StepSimulator, ShippedClusterFilesLoad) {
  for (const char* name : {"h100_ib400.json", "a100_ib200.json", "cpu_vm.json"}) {
    const ClusterSpec c = load_cluster(std::string(STRATA_SOURCE_DIR) + "/tools/clusters/" + name);
    EXPECT_GT(c.peak_tflops, 0) << name;
  }
}

TEST(StepSimulator, InputChecksNameTheFlags) {
  SimInput in = small_model();
  in.plan.model.layers = 4;
  in.plan.layout.pp = 2;
  in.microbatches = 1;
  EXPECT_THROW(simulate_step(in), Error);  // 1F1B needs M >= P
  in.microbatches = 3;
  in.schedule = PipelineKind::kInterleaved;
  EXPECT_THROW(simulate_step(in), Error);  // interleaved needs M a multiple of P
  in.microbatches = 4;
  in.virtual_stages = 2;
  EXPECT_NO_THROW(simulate_step(in));
  in.schedule = PipelineKind::k1F1B;
  EXPECT_THROW(simulate_step(in), Error);  // virtual stages only interleaved
  EXPECT_THROW(pipeline_kind_from_name("zb"), Error);
}

}  // namespace
}  // namespace strata
