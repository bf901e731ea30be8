// Weight placement in the decode path (DecodePlacement): blocks streamed from host memory or through the reader
// (disk), and the KV cache in host memory, give the resident decoder's logits and tokens bit for bit at any resident
// count and prefetch depth; a device
// budget keeps as many blocks resident as fit and holds the decoder within it; a budget too small for one streamed
// block is refused with the least that would do; a read that fails while streaming fails the pass naming the tensor;
// the bytes a streamed placement moves are strata-plan --inference's to the byte; the copy threads a placement keeps
// busy beside the compute.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "runtime/inference/generator.h"
#include "runtime/memory/inference_planner.h"
#include "tests/models/gpt/decode_test_data.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using test_data::f32_plan_input;
using test_data::some_tokens;
using test_data::spec_weights;

// Five blocks, so that a budget or a resident count leaves several streamed behind several resident.
GptConfig five() { return GptConfig{5, 4, 64, 96, 128}; }

struct Outputs {
  std::vector<float> prefill_logits;         // every prompt position of sequence 0
  std::vector<std::vector<std::int32_t>> tokens;  // greedy, then sampled
  std::uint64_t streamed = 0, cache_link = 0;
};

// A prompt prefilled with every row's logits, then generate() greedy and sampled on three prompts.
Outputs run_with(const DecodePlacement& where, const WeightReader& read) {
  const GptConfig cfg = five();
  GptDecoder dec(cfg, strata::test::runtime().device(), 3, read, 40, DType::kF32, where);
  Outputs r;
  const std::vector<std::int32_t> p = some_tokens(70, cfg.vocab, 3);
  r.prefill_logits.resize(p.size() * static_cast<std::size_t>(cfg.vocab));
  dec.prefill(0, p.data(), static_cast<int>(p.size()), r.prefill_logits.data());
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < 3; ++b) prompts.push_back(some_tokens(5 + 9 * b, cfg.vocab, 20 + static_cast<std::uint64_t>(b)));
  GenerateOptions o;
  o.max_new_tokens = 16;
  for (double temperature : {0.0, 0.8}) {
    o.sampling = SamplingOptions{temperature, 20, 0.9, 11};
    const Generation g = generate(dec, prompts, o);
    for (const std::vector<std::int32_t>& t : g.tokens) r.tokens.push_back(t);
  }
  r.streamed = dec.streamed_bytes_read();
  r.cache_link = dec.cache_link_bytes();
  return r;
}

TEST(GptDecodePlacement, StreamedBlocksGiveTheResidentBits) {
  const GptConfig cfg = five();
  const WeightReader read = spec_weights(cfg, 4);
  const Outputs resident = run_with(DecodePlacement{}, read);
  EXPECT_EQ(resident.streamed, 0u);
  struct Case {
    int resident_layers, prefetch;
    WeightSource source;
    bool kv_on_host = false;
  };
  for (const Case& c : {Case{0, 0, WeightSource::kHost}, Case{0, 1, WeightSource::kHost},
                        Case{2, 2, WeightSource::kHost}, Case{0, 4, WeightSource::kHost},
                        Case{0, 1, WeightSource::kDisk}, Case{3, 0, WeightSource::kDisk},
                        Case{5, 0, WeightSource::kHost, true}, Case{5, 2, WeightSource::kHost, true},
                        Case{0, 1, WeightSource::kHost, true}, Case{2, 8, WeightSource::kDisk, true}}) {
    DecodePlacement where;
    where.resident_layers = c.resident_layers;
    where.prefetch_depth = c.prefetch;
    where.source = c.source;
    where.kv_on_host = c.kv_on_host;
    const Outputs got = run_with(where, read);
    const std::string what = std::string(weight_source_name(c.source)) + ", " + std::to_string(c.resident_layers) +
                             " resident, prefetch " + std::to_string(c.prefetch) +
                             (c.kv_on_host ? ", KV cache in host memory" : "");
    ASSERT_EQ(got.prefill_logits.size(), resident.prefill_logits.size());
    EXPECT_EQ(std::memcmp(got.prefill_logits.data(), resident.prefill_logits.data(), got.prefill_logits.size() * 4),
              0)
        << what;
    EXPECT_EQ(got.tokens, resident.tokens) << what;
    EXPECT_EQ(got.streamed > 0, c.resident_layers < cfg.layers) << what;
    EXPECT_EQ(got.cache_link > 0, c.kv_on_host) << what;
  }
}

// Each pass copies every streamed block once into its slot; a budget leaves as many resident as fit, within it.
TEST(GptDecodePlacement, BudgetKeepsWhatFitsResident) {
  const GptConfig cfg = five();
  Device& dev = strata::test::runtime().device();
  const GptDecoder all(cfg, dev, 2, spec_weights(cfg, 5));
  DecodePlacement none_resident;
  none_resident.resident_layers = 0;
  const std::uint64_t block =
      (all.weight_bytes() -
       GptDecoder(cfg, dev, 2, spec_weights(cfg, 5), 128, DType::kF32, none_resident).resident_weight_bytes()) /
      5;
  ASSERT_GT(block, 0u);
  EXPECT_EQ(all.resident_layers(), 5);
  // Room for 2 resident blocks and the 2 slots of prefetch 1, a few bytes short of a third resident one.
  const std::uint64_t fixed = all.device_bytes() - 5 * block;
  DecodePlacement where;
  where.device_memory = fixed + 4 * block + block / 2;
  const std::size_t before = dev.memory_stats().current_total();
  GptDecoder dec(cfg, dev, 2, spec_weights(cfg, 5), 128, DType::kF32, where);
  EXPECT_EQ(dev.memory_stats().current_total() - before, dec.device_bytes());
  EXPECT_LE(dec.device_bytes(), where.device_memory);
  EXPECT_EQ(dec.resident_layers(), 2);
  EXPECT_EQ(dec.stream_slot_bytes(), 2 * block);
  const std::vector<std::int32_t> p = some_tokens(10, cfg.vocab, 1);
  dec.prefill(0, p.data(), 10);
  dec.decode({0}, {1});
  EXPECT_EQ(dec.streamed_bytes_read(), 2 * 3 * block);  // two passes, three streamed blocks each
  // Everything fits: every block resident, no slots.
  where.device_memory = all.device_bytes();
  EXPECT_EQ(GptDecoder(cfg, dev, 2, spec_weights(cfg, 5), 128, DType::kF32, where).resident_layers(), 5);
}

TEST(GptDecodePlacement, BudgetTooSmallNamesTheLeast) {
  const GptConfig cfg = five();
  DecodePlacement where;
  where.device_memory = 100000;
  try {
    GptDecoder dec(cfg, strata::test::runtime().device(), 1, spec_weights(cfg, 5), 128, DType::kF32, where);
    ADD_FAILURE() << "a budget below the embeddings was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("the least, every block streamed with --prefetch 0, is"), std::string::npos)
        << e.what();
  }
  where.device_memory = 0;
  where.resident_layers = 6;
  EXPECT_THROW(GptDecoder(cfg, strata::test::runtime().device(), 1, spec_weights(cfg, 5), 128, DType::kF32, where),
               Error);
  where.resident_layers = 0;
  where.prefetch_depth = 9;
  EXPECT_THROW(GptDecoder(cfg, strata::test::runtime().device(), 1, spec_weights(cfg, 5), 128, DType::kF32, where),
               Error);
}

// The threads a placement keeps copying beside the compute, and the compute threads that leaves: none for resident
// blocks or a host KV cache; on the CPU backend the host stream's one upload thread, the disk stream's two readers
// (one with a single slot); beside a GPU only the disk readers.
TEST(GptDecodePlacement, CopyThreadsAreTheUploadStreams) {
  const GptConfig cfg = five();
  Device& dev = strata::test::runtime().device();
  const bool cpu = dev.kind() == DeviceKind::kCpu;
  auto threads = [&](int resident, WeightSource source, int depth, bool kv_on_host) {
    DecodePlacement where;
    where.resident_layers = resident;
    where.source = source;
    where.prefetch_depth = depth;
    where.kv_on_host = kv_on_host;
    const GptDecoder dec(cfg, dev, 1, spec_weights(cfg, 5), 128, DType::kF32, where);
    EXPECT_EQ(compute_threads(4, dec), 4 - dec.copy_threads());
    EXPECT_EQ(compute_threads(1, dec), 1);  // never none
    return dec.copy_threads();
  };
  EXPECT_EQ(threads(-1, WeightSource::kHost, 1, false), 0);
  EXPECT_EQ(threads(-1, WeightSource::kHost, 1, true), 0);
  EXPECT_EQ(threads(0, WeightSource::kHost, 2, false), cpu ? 1 : 0);
  EXPECT_EQ(threads(3, WeightSource::kDisk, 1, false), 2);
  EXPECT_EQ(threads(4, WeightSource::kDisk, 1, false), 1);  // one streamed block: one slot, one reader
  EXPECT_EQ(threads(2, WeightSource::kDisk, 0, true), 1);
}

// A tensor whose read fails once streaming has begun (a chunk failing its CRC): the pass that needs it throws with the
// reader's message, and the decoder is destroyed without waiting out the timeout.
TEST(GptDecodePlacement, AReadFailingWhileStreamingFailsThePass) {
  const GptConfig cfg = five();
  auto armed = std::make_shared<std::atomic<bool>>(false);
  const WeightReader init = spec_weights(cfg, 6);
  const WeightReader read = [armed, init](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    STRATA_CHECK_CODE(ErrorCode::kIo, !(armed->load() && name == "h.3.mlp.c_fc.weight"),
                      "chunk-7.bin is corrupt: tensor '{}' fails its CRC", name);
    init(name, begin, count, out);
  };
  DecodePlacement where;
  where.resident_layers = 1;
  where.prefetch_depth = 0;
  where.source = WeightSource::kDisk;
  GptDecoder dec(cfg, strata::test::runtime().device(), 1, read, 128, DType::kF32, where);
  armed->store(true);  // the first streamed block (h.1) may already be loading; h.3's read comes later
  const std::vector<std::int32_t> p = some_tokens(4, cfg.vocab, 2);
  try {
    dec.prefill(0, p.data(), 4);
    ADD_FAILURE() << "the failed read went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk-7.bin is corrupt: tensor 'h.3.mlp.c_fc.weight' fails its CRC"),
              std::string::npos)
        << e.what();
  }
}

// A streamed placement's bytes per decode step, in device memory and over the link, and its memory by category, are
// strata-plan --inference's prediction for it in f32, to the byte: with the KV cache in device memory, and in host
// memory (its staging slots on the device, and each step's cached positions in and new ones out over the link).
TEST(GptDecodePlacement, BytesAreThePlannersPrediction) {
  const GptConfig cfg = five();
  const int P = 30, G = cfg.ctx - P, B = 2, resident = 2, depth = 1;
  for (bool kv_on_host : {false, true}) {
    DecodePlacement where;
    where.resident_layers = resident;
    where.prefetch_depth = depth;
    where.kv_on_host = kv_on_host;
    Device& dev = strata::test::runtime().device();
    const std::size_t before = dev.memory_stats().current_total();
    GptDecoder dec(cfg, dev, B, spec_weights(cfg, 7), 128, DType::kF32, where);
    EXPECT_EQ(dev.memory_stats().current_total() - before, dec.device_bytes()) << kv_on_host;
    std::vector<std::vector<std::int32_t>> prompts;
    for (int b = 0; b < B; ++b) prompts.push_back(some_tokens(P, cfg.vocab, 40 + static_cast<std::uint64_t>(b)));
    GenerateOptions o;
    o.max_new_tokens = G;
    const Generation g = generate(dec, prompts, o);
    ASSERT_EQ(g.decode_steps, static_cast<std::uint64_t>(G - 1));
    const InferenceInput in = f32_plan_input(cfg, P, 1, depth);
    const InferencePlan plan = plan_inference_at(in, B, resident, !kv_on_host);
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.resident_weight_bytes()), plan.resident_weights) << kv_on_host;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.stream_slot_bytes()), plan.stream_buffers) << kv_on_host;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.cache_bytes()), plan.kv_cache) << kv_on_host;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.cache_staging_bytes()), plan.kv_staging) << kv_on_host;
    // Everything it holds, the workspace of its widest pass included: what the planner places by.
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.device_bytes()), plan.total) << kv_on_host;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.cache_host_bytes()),
                     kv_on_host ? B * cfg.ctx * plan.kv_bytes_per_token : 0)
        << kv_on_host;
    const double steps = G - 1;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_weight_bytes + g.decode_cache_bytes) / steps, plan.device_bytes)
        << kv_on_host;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_streamed_bytes + g.decode_cache_link_bytes) / steps, plan.link_bytes)
        << kv_on_host;
    EXPECT_EQ(g.decode_cache_link_bytes, kv_on_host ? g.decode_cache_bytes : 0u) << kv_on_host;
  }
}

}  // namespace
}  // namespace strata::gpt
