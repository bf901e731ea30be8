// The inference planner's arithmetic on a model small enough to work by hand (docs/inference.md), its placement
// search, and the document's case: a 70B model on one 80 GB GPU and on one H200.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "runtime/memory/inference_planner.h"

namespace strata {
namespace {

// 4 layers, hidden 64, 4 heads (head_dim 16), vocab 256, a context of 128 (64 prompt, 64 generated), bf16 weights
// and KV cache. By hand: a layer is 12 h^2 + 13 h = 49984 parameters (99968 bytes); outside the layers
// (256 + 128) h + 2 h = 24704 (49408 bytes); keys and values are 2 x 4 x 16 x 2 = 256 bytes a position and layer,
// 1024 for all four.
InferenceInput small() {
  InferenceInput in;
  in.model = ModelShape{0, 4, 64, 4, 256, 128};  // params (0: from the dimensions), layers, hidden, heads, vocab, seq
  in.prompt = 64;
  in.hardware.device_memory = 1e9;
  in.hardware.device_gbs = 100;
  in.hardware.host_gbs = 10;
  in.hardware.disk_gbs = 1;
  in.hardware.peak_tflops = 1;
  in.hardware.efficiency = 0.5;
  in.validate();
  return in;
}

constexpr double kLayer = 99968, kOutside = 49408, kKvToken = 1024;
// The decoder's widest pass, 128 rows (kPrefillRows) of f32: a token, a mean and an rstd, five rows of h, q | k | v
// (3 h), the attention's output (h) and a log-sum-exp a head (4), the MLP's up product and GELU (4 h each), the logits.
constexpr double kWorkspace = 128 * (3 + 5 * 64 + 3 * 64 + 64 + 4 + 4 * 64 + 4 * 64 + 256) * 4;
// The mean context over the decode steps of the 64 generated tokens: 64 + 64 / 2.
constexpr double kContext = 96;

TEST(InferencePlanner, ResidentDecodeIsBoundByDeviceMemory) {
  const InferencePlan p = plan_inference_at(small(), 1, 4, true);
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, kKvToken);
  EXPECT_DOUBLE_EQ(p.resident_weights, kOutside + 4 * kLayer);
  EXPECT_DOUBLE_EQ(p.stream_buffers, 0);
  EXPECT_DOUBLE_EQ(p.kv_cache, 128 * kKvToken);
  EXPECT_DOUBLE_EQ(p.workspace, kWorkspace);
  EXPECT_DOUBLE_EQ(p.total, kOutside + 4 * kLayer + 128 * kKvToken + kWorkspace);
  // A step reads every weight once and the cache up to the mean context; nothing crosses the host link.
  EXPECT_DOUBLE_EQ(p.device_bytes, kOutside + 4 * kLayer + kContext * kKvToken);
  EXPECT_DOUBLE_EQ(p.link_bytes, 0);
  // Two FLOPs a parameter (the position table is looked up, not multiplied) and 4 h per context position and layer.
  EXPECT_DOUBLE_EQ(p.flops, 2 * (24704 - 128 * 64 + 4 * 49984) + 4 * 4 * kContext * 64);
  EXPECT_EQ(p.bound, "device memory bandwidth");
  EXPECT_DOUBLE_EQ(p.step_s, p.device_bytes / 100e9);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 1 / p.step_s);
  EXPECT_DOUBLE_EQ(p.bytes_per_token, p.device_bytes);
}

TEST(InferencePlanner, StreamedLayersCrossTheLinkEveryStep) {
  InferenceInput in = small();
  const InferencePlan p = plan_inference_at(in, 2, 1, true);
  EXPECT_EQ(p.streamed_layers, 3);
  EXPECT_DOUBLE_EQ(p.stream_buffers, 2 * kLayer);  // the layer computing and the one prefetched
  EXPECT_DOUBLE_EQ(p.link_bytes, 3 * kLayer);
  EXPECT_DOUBLE_EQ(p.host_bytes, 3 * kLayer);
  EXPECT_DOUBLE_EQ(p.device_bytes, kOutside + 4 * kLayer + 2 * kContext * kKvToken);
  EXPECT_EQ(p.bound, "host link");
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 2 / (3 * kLayer / 10e9));
  EXPECT_DOUBLE_EQ(p.bytes_per_token, (p.device_bytes + p.link_bytes) / 2);
  // From disk, the slower tier sets the pace.
  in.source = WeightSource::kDisk;
  const InferencePlan d = plan_inference_at(in, 2, 1, true);
  EXPECT_DOUBLE_EQ(d.disk_bytes, 3 * kLayer);
  EXPECT_EQ(d.bound, "disk");
  EXPECT_DOUBLE_EQ(d.step_s, 3 * kLayer / 1e9);
}

// Three layers streamed over a shard group of 3: the layer's 99968 bytes in parts of ceil(99968 / 12) x 4 = 33324
// (a slot of 99972, the last part padded by 4), each device fetching its part and receiving the other two. From
// device memory (ZeRO-3), the parts stay there and nothing crosses the link.
TEST(InferencePlanner, ShardedLayersAreFetchedInPartsAndGathered) {
  InferenceInput in = small();
  in.shard = 3;
  in.hardware.peer_gbs = 5;
  EXPECT_EQ(shard_part(99968, 3), 33324u);
  EXPECT_EQ(shard_part(10, 1), 10u);
  EXPECT_EQ(shard_part(10, 4), 4u);
  const InferencePlan h = plan_inference_at(in, 2, 1, true);
  EXPECT_DOUBLE_EQ(h.stream_buffers, 2 * 99972);
  EXPECT_DOUBLE_EQ(h.weight_shards, 0);
  EXPECT_DOUBLE_EQ(h.host_bytes, 3 * 33324);
  EXPECT_DOUBLE_EQ(h.link_bytes, 3 * 33324);
  EXPECT_DOUBLE_EQ(h.gather_bytes, 3 * 2 * 33324);
  EXPECT_DOUBLE_EQ(h.gather_s, 3 * 2 * 33324 / 5e9);
  EXPECT_DOUBLE_EQ(h.device_bytes, kOutside + 4 * kLayer + 2 * kContext * kKvToken);  // every weight read once
  in.source = WeightSource::kDevice;
  const InferencePlan d = plan_inference_at(in, 2, 1, true);
  EXPECT_DOUBLE_EQ(d.weight_shards, 3 * 33324);
  EXPECT_DOUBLE_EQ(d.total, h.total + 3 * 33324);
  EXPECT_DOUBLE_EQ(d.host_bytes, 0);
  EXPECT_DOUBLE_EQ(d.link_bytes, 0);
  EXPECT_EQ(d.bound, "interconnect");
  in.shard = 1;
  EXPECT_THROW(in.validate(), Error);  // --weights-from device needs --shard 2 or more
}

TEST(InferencePlanner, HostCacheIsReadAndAppendedOverTheLink) {
  const InferencePlan p = plan_inference_at(small(), 1, 4, false);
  EXPECT_DOUBLE_EQ(p.kv_cache, 0);
  EXPECT_DOUBLE_EQ(p.kv_staging, 2 * 128 * 256);  // two layers' keys and values
  EXPECT_DOUBLE_EQ(p.link_bytes, kContext * kKvToken);  // the cached positions in, the new one out: those attended
  EXPECT_DOUBLE_EQ(p.host_bytes, 128 * kKvToken);
}

// One byte short of everything resident with the cache on the device: streaming a layer costs two slots, more than
// the layer, so the device placement must drop to one resident layer (three streamed); the host cache keeps all four
// resident and moves only keys and values, which is faster, and the search takes it.
TEST(InferencePlanner, SearchPicksTheFasterPlacementThatFits) {
  InferenceInput in = small();
  const double all_resident = kOutside + 4 * kLayer + 128 * kKvToken + kWorkspace;
  in.hardware.device_memory = all_resident;
  InferencePlan p = plan_inference(in, 1);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.resident_layers, 4);
  EXPECT_TRUE(p.kv_on_device);

  in.hardware.device_memory = all_resident - 1;
  const InferencePlan device = plan_inference_at(in, 1, 1, true);
  EXPECT_TRUE(device.fits);
  EXPECT_FALSE(plan_inference_at(in, 1, 2, true).fits);
  p = plan_inference(in, 1);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.resident_layers, 4);
  EXPECT_FALSE(p.kv_on_device);
  EXPECT_GT(p.tokens_per_s, device.tokens_per_s);
  // Fixed by the caller, the cache stays on the device and the layers give way.
  in.kv_on_device = 1;
  p = plan_inference(in, 1);
  EXPECT_TRUE(p.kv_on_device);
  EXPECT_EQ(p.resident_layers, 1);
}

TEST(InferencePlanner, NothingFitsBelowTheSmallestPlacement) {
  InferenceInput in = small();
  in.hardware.device_memory = 100000;  // less than the embeddings, two layer slots and a workspace
  const InferencePlan p = best_inference_plan(in);
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.resident_layers, 0);
  EXPECT_NE(inference_report(in, p, p).find("DOES NOT FIT"), std::string::npos);
}

// With memory to spare, tokens/s grows with the batch (the weights are read once for all of it) until the compute
// binds, and the search returns the batch where it stops growing.
TEST(InferencePlanner, ThroughputGrowsWithBatchUntilComputeBinds) {
  InferenceInput in = small();
  in.hardware.device_memory = 1e12;
  double last = 0;
  for (int b = 1; b <= 16; b *= 2) {
    const InferencePlan p = plan_inference(in, b);
    EXPECT_GT(p.tokens_per_s, last) << "batch " << b;
    last = p.tokens_per_s;
  }
  const InferencePlan best = best_inference_plan(in);
  EXPECT_TRUE(best.fits);
  EXPECT_GT(best.batch, 16);
  for (int b = 1; b <= kMaxInferenceBatch; b *= 2) EXPECT_LE(plan_inference(in, b).tokens_per_s, best.tokens_per_s);
}

// The document's case, a 70B decoder (80 layers, hidden 8192, 64 heads, 8 key/value heads, bf16) with a 4096-token
// context: its 140 GB of weights do not fit one 80 GB device, which streams most layers over the host link; an
// H200's 141 GB holds nearly all of them at batch 1, and decodes far faster.
TEST(InferencePlanner, SeventyBillionOnOneGpu) {
  InferenceInput in;
  in.model = ModelShape{70e9, 80, 8192, 64, 32000, 4096};
  in.kv_heads = 8;
  in.prompt = 2048;
  in.hardware.host_gbs = 25;
  in.validate();
  const InferencePlan h100 = plan_inference(in, 1);
  EXPECT_TRUE(h100.fits);
  EXPECT_GT(h100.streamed_layers, 30);
  EXPECT_EQ(h100.bound, "host link");
  EXPECT_LT(h100.tokens_per_s, 1.0);
  in.hardware.device_memory = 141e9;
  in.hardware.device_gbs = 4800;
  const InferencePlan h200 = plan_inference(in, 1);
  EXPECT_TRUE(h200.fits);
  EXPECT_LT(h200.streamed_layers, h100.streamed_layers);
  EXPECT_GT(h200.tokens_per_s, 2 * h100.tokens_per_s);
  EXPECT_DOUBLE_EQ(h200.kv_bytes_per_token, 80 * 2 * 8 * 128 * 2);  // 8 kv heads of 128, bf16
}

TEST(InferencePlanner, ValidateNamesTheFlag) {
  InferenceInput in = small();
  in.prompt = 128;
  EXPECT_THROW(
      try { in.validate(); } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("--prompt 128"), std::string::npos) << e.what();
        throw;
      },
      std::exception);
  in = small();
  in.kv_heads = 3;
  EXPECT_THROW(in.validate(), std::exception);
  in = small();
  in.tp = 3;
  EXPECT_THROW(in.validate(), std::exception);
}

}  // namespace
}  // namespace strata
