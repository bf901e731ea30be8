// Weights sharded over the data-parallel ranks (GptDecoder with a shard group, ZeRO-Inference) at np 2 and 4: each
// rank decodes prompts of its own (a different count and length on each, and none on the last rank at np 4, so the
// ranks prefill and decode for different numbers of passes and generate() must keep them in step), its blocks
// gathered from the group's parts every pass, from host memory, disk and device memory. Each rank's logits and tokens
// are the bits of the same prompts decoded by a resident decoder alone, for either family; at np 4, tp 2 x shard 2
// gives the resident tp decoder's bits. The bytes a step moves and the memory by category are strata-plan
// --inference's at that shard count, to the byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/rank_values.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "kernels/cpu/threads.h"
#include "runtime/inference/generator.h"
#include "runtime/memory/inference_planner.h"
#include "tests/models/gpt/decode_test_data.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using test_data::f32_plan_input;
using test_data::some_tokens;
using test_data::spec_weights;

GptConfig model() { return GptConfig{3, 4, 64, 97, 96}; }

// The Llama-style family at the same vocabulary: 4 heads on 2 key-value heads, q | k | v biases, an untied head.
GptConfig llama() { return test_data::llama_config(3, 4, 2, 8, 48, 72, 97, 96); }

void share_cores() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu::set_num_threads(std::max(1, cores / strata::test::runtime().local_size()));
}

// Rank r's prompts: r + 1 of them, of 5 + 13 r tokens and up (more than one chunk of 16 rows from rank 1 on), none
// on rank 3; it generates 4 + 3 r tokens each.
std::vector<std::vector<std::int32_t>> prompts_of(int rank) {
  std::vector<std::vector<std::int32_t>> p;
  if (rank == 3) return p;
  for (int i = 0; i <= rank; ++i)
    p.push_back(some_tokens(5 + 13 * rank + i, model().vocab, 40 + static_cast<std::uint64_t>(10 * rank + i)));
  return p;
}

struct Outputs {
  std::vector<float> logits;  // every position of the first prompt (empty without prompts)
  Generation gen;
};

// `prompts` through a decoder of `where` over `tp` and `shard` (null: alone): the first prompt's logits at every
// position (its own pass, in step with the group's), then generate() over all of them.
Outputs decode(const std::vector<std::vector<std::int32_t>>& prompts, int rank, const DecodePlacement& where,
               Communicator* tp, Communicator* shard, const GptConfig& cfg = model()) {
  share_cores();
  const int seqs = std::max<int>(1, static_cast<int>(prompts.size()));
  GptDecoder dec(cfg, strata::test::runtime().device(), seqs, spec_weights(cfg, 8), 16, DType::kF32, where, tp, shard);
  Outputs out;
  // One more sequence's prefill with every row's logits, kept in step by hand as generate() does: the group agrees
  // on the most passes first, and ranks with fewer idle after theirs.
  const std::vector<std::int32_t> first = some_tokens(20 + 7 * rank, cfg.vocab, 9);
  const int n = static_cast<int>(first.size());
  int idle = 0;
  if (Communicator* group = dec.lockstep_group()) {
    const std::vector<double> passes = all_gather_values(*group, dec.prefill_passes(n));
    idle = static_cast<int>(*std::max_element(passes.begin(), passes.end())) - dec.prefill_passes(n);
  }
  out.logits.resize(first.size() * static_cast<std::size_t>(cfg.vocab));
  dec.prefill(0, first.data(), n, out.logits.data());
  for (int i = 0; i < idle; ++i) dec.idle_pass();
  GenerateOptions o;
  o.max_new_tokens = 4 + 3 * rank;
  if (!prompts.empty() || dec.lockstep_group()) out.gen = generate(dec, prompts, o);
  return out;
}

std::unique_ptr<Communicator> shard_group(int tp) {
  Communicator& world = strata::test::runtime().world();
  return world.split(world.rank() % tp, world.rank(), "shard");
}

// Each rank's outputs for `cfg` with every block sharded over the world, from each source, against a decoder alone.
void expect_bits_of_a_decoder_alone(const GptConfig& cfg) {
  Communicator& world = strata::test::runtime().world();
  const int rank = world.rank();
  const std::vector<std::vector<std::int32_t>> prompts = prompts_of(rank);
  const Outputs alone = decode(prompts, rank, {}, nullptr, nullptr, cfg);
  const std::unique_ptr<Communicator> shard = shard_group(1);
  for (WeightSource source : {WeightSource::kHost, WeightSource::kDisk, WeightSource::kDevice})
    for (int resident : {0, 1}) {
      DecodePlacement where;
      where.resident_layers = resident;
      where.source = source;
      where.prefetch_depth = resident;  // 0 and 1
      const Outputs sharded = decode(prompts, rank, where, nullptr, shard.get(), cfg);
      const std::string what =
          cfg.describe() + ", " + weight_source_name(source) + ", " + std::to_string(resident) + " resident";
      EXPECT_EQ(std::memcmp(sharded.logits.data(), alone.logits.data(), alone.logits.size() * 4), 0) << what;
      EXPECT_EQ(sharded.gen.tokens, alone.gen.tokens) << what;
      EXPECT_GT(sharded.gen.decode_gathered_bytes, 0u) << what;
      // Rank 0 has the least work (rank 3 none at np 4): they idle while the others go on.
      if (rank == 0 || rank == 3) {
        EXPECT_GT(sharded.gen.idle_passes, 0u) << what;
      }
    }
}

// Either family: the Llama-style blocks (their slots and widths, an untied head outside them) shard the same way.
TEST(GptDecodeShard, EachRankDecodesTheBitsOfADecoderAlone) {
  if (strata::test::runtime().world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  for (const GptConfig& cfg : {model(), llama()}) expect_bits_of_a_decoder_alone(cfg);
}

// np 4: tp groups {0, 1} and {2, 3}, shard groups {0, 2} and {1, 3}; a tp group's ranks decode the same prompts.
TEST(GptDecodeShard, TensorParallelGroupsShareTheirSlices) {
  Communicator& world = strata::test::runtime().world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int group = world.rank() / 2;
  const std::unique_ptr<Communicator> tp = world.split(group, world.rank(), "tp");
  const std::unique_ptr<Communicator> shard = shard_group(2);
  const std::vector<std::vector<std::int32_t>> prompts = prompts_of(group);
  const Outputs resident = decode(prompts, group, {}, tp.get(), nullptr);
  DecodePlacement where;
  where.resident_layers = 0;
  where.source = WeightSource::kDevice;
  const Outputs sharded = decode(prompts, group, where, tp.get(), shard.get());
  EXPECT_EQ(std::memcmp(sharded.logits.data(), resident.logits.data(), resident.logits.size() * 4), 0);
  EXPECT_EQ(sharded.gen.tokens, resident.gen.tokens);
}

TEST(GptDecodeShard, BytesAreThePlannersAtThatShardCount) {
  Communicator& world = strata::test::runtime().world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const GptConfig cfg = model();
  const int P = 20, G = cfg.ctx - P, B = 2;
  for (WeightSource source : {WeightSource::kHost, WeightSource::kDisk, WeightSource::kDevice}) {
    DecodePlacement where;
    where.resident_layers = 1;
    where.source = source;
    share_cores();
    GptDecoder dec(cfg, strata::test::runtime().device(), B, spec_weights(cfg, 8), 128, DType::kF32, where, nullptr,
                   &world);
    std::vector<std::vector<std::int32_t>> prompts;  // the same work on every rank: no idle pass
    for (int b = 0; b < B; ++b) prompts.push_back(some_tokens(P, cfg.vocab, 70 + static_cast<std::uint64_t>(b)));
    GenerateOptions o;
    o.max_new_tokens = G;
    const Generation g = generate(dec, prompts, o);
    const std::string what = weight_source_name(source);
    ASSERT_EQ(g.decode_steps, static_cast<std::uint64_t>(G - 1)) << what;
    EXPECT_EQ(g.idle_passes, 0u) << what;
    InferenceInput in = f32_plan_input(cfg, P);
    in.shard = world.size();
    in.source = source;
    const InferencePlan plan = plan_inference_at(in, B, 1, true);
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.resident_weight_bytes()), plan.resident_weights) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.stream_slot_bytes()), plan.stream_buffers) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.weight_shard_bytes()), plan.weight_shards) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.cache_bytes()), plan.kv_cache) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.device_bytes()), plan.total) << what;
    const double steps = G - 1;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_weight_bytes + g.decode_cache_bytes) / steps, plan.device_bytes)
        << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_streamed_bytes) / steps, plan.link_bytes) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_gathered_bytes) / steps, plan.gather_bytes) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_streamed_bytes) / steps,
                     source == WeightSource::kDisk ? plan.disk_bytes : plan.link_bytes)
        << what;
  }
}

TEST(GptDecodeShard, DeviceSourceWithoutAGroupIsRefused) {
  DecodePlacement where;
  where.resident_layers = 1;
  where.source = WeightSource::kDevice;
  const GptConfig cfg = model();
  try {
    GptDecoder dec(cfg, strata::test::runtime().device(), 1, spec_weights(cfg, 8), 16, DType::kF32, where);
    FAIL() << "a device source without a shard group was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--shard-weights"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::gpt
