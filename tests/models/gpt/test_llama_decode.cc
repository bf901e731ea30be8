// The decode path of the Llama-style family (GptDecoder on a Llama GptConfig): PyTorch's greedy generation on Hugging
// Face weights (tests/data/llama_gen_ref.json), token by token and in chunks against one pass over the whole sequence,
// a batch of different lengths against each alone, every weight placement bit for bit against the resident one, and
// a KV cache of the key-value heads only (2 x layers x kv_width floats a position), as strata-plan --inference counts;
// and the reader of Hugging Face's Llama tensors: any runs of a parameter read exactly their elements' bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "models/gpt/model/hf_llama_weights.h"
#include "runtime/inference/generator.h"
#include "runtime/memory/inference_planner.h"
#include "runtime/sharding/shard_layout.h"
#include "tests/models/gpt/decode_test_data.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using test_data::max_rel_diff;
using test_data::some_tokens;

// Four blocks of grouped-query attention (4 query heads of 8 channels on 2 key-value heads: q narrower than the
// residual of 48), q | k | v biases and an untied head, attention over two 64-key tiles, a rotary base of 500.
GptConfig llama4() {
  GptConfig c = test_data::llama_config(4, 4, 2, 8, 48, 72, 80, 96);
  c.rope_theta = 500.0;
  return c;
}

WeightReader llama_weights(std::uint64_t seed) { return test_data::spec_weights_with_biases(llama4(), seed); }

// Runs of a parameter as ranks hold them (a shard's partial first and last rows, a tp slice's pieces of rows, in any
// order, packed): each gets the whole parameter's elements, and the file gives 4 bytes (f32) for each element held, no
// more: a transposed tensor is read a column's held rows at a time.
TEST(HfLlamaWeightsRuns, AnyRunsGiveTheirElementsReadingOnlyThem) {
  for (const char* name : {"llama_gen", "llama_tiny_bias"}) {
    const std::string ref = std::string(name) == "llama_gen" ? "llama_gen_ref.json" : "llama_tiny_bias_ref.json";
    const GptConfig cfg = test::llama_reference_model(test::load_json(test::data_dir() + ref)["config"]);
    const SafetensorsReader file(test::data_dir() + name + "_init.safetensors");
    const HfLlamaWeights hf(file, cfg);
    std::mt19937_64 rng(7);
    for (const UnitSpec& u : gpt_units(cfg, 1))
      for (const SlotSpec& slot : u.slots) {
        const std::size_t n = shape_numel(slot.shape);
        std::vector<float> whole(n);
        hf.read(slot.name, 0, n, whole.data());
        // Cut [0, n) at random places; keep every other piece, in a shuffled order, packed one after another.
        std::vector<std::size_t> cuts{0, n};
        for (int k = 0; k < 6; ++k) cuts.push_back(std::uniform_int_distribution<std::size_t>(0, n)(rng));
        std::sort(cuts.begin(), cuts.end());
        std::vector<GlobalRun> runs;
        for (std::size_t k = 1; k + 1 < cuts.size(); k += 2)
          if (cuts[k + 1] > cuts[k]) runs.push_back(GlobalRun{0, cuts[k], cuts[k + 1] - cuts[k]});
        std::shuffle(runs.begin(), runs.end(), rng);
        std::size_t held = 0;
        for (GlobalRun& r : runs) {
          r.local = held;
          held += r.count;
        }
        std::vector<float> got(held, -1.0f);
        const std::uint64_t before = file.bytes_read();
        hf.read(slot.name, runs, got.data());
        EXPECT_EQ(file.bytes_read() - before, 4 * held) << name << " " << slot.name;
        for (const GlobalRun& r : runs)
          EXPECT_EQ(std::memcmp(got.data() + r.local, whole.data() + r.global, r.count * 4), 0)
              << name << " " << slot.name << ": elements [" << r.global << ", " << r.global + r.count << ")";
      }
  }
}

TEST(LlamaDecode, GreedyTokensAndLogitsEqualPyTorchs) {
  const nlohmann::json ref = test::load_json(test::data_dir() + "llama_gen_ref.json");
  const GptConfig cfg = test::llama_reference_model(ref["config"]);
  const SafetensorsReader file(test::data_dir() + "llama_gen_init.safetensors");
  ASSERT_TRUE(has_hf_llama_names(file));
  HfLlamaWeights hf(file, cfg);
  GptDecoder dec(cfg, strata::test::runtime().device(), 1,
                 [&](const std::string& name, std::size_t begin, std::size_t count, float* out) {
                   hf.read(name, begin, count, out);
                 });
  test_data::expect_greedy_reference(dec, ref);
}

// KV-cache decode, one token a step after a prompt, against one prefill of the whole sequence; a prefill in chunks of
// 32 rows against it too: every position's logits within 1e-5 of the row's largest (f32).
TEST(LlamaDecode, PrefillThenDecodeEqualsOnePrefill) {
  const GptConfig cfg = llama4();
  Device& dev = strata::test::runtime().device();
  const int T = cfg.ctx, V = cfg.vocab, prompt = 11;
  const std::vector<std::int32_t> toks = some_tokens(T, V, 5);
  GptDecoder whole(cfg, dev, 1, llama_weights(1), T);
  std::vector<float> all(static_cast<std::size_t>(T * V));
  whole.prefill(0, toks.data(), T, all.data());
  GptDecoder step(cfg, dev, 1, llama_weights(1));
  std::vector<float> got(all.size());
  step.prefill(0, toks.data(), prompt, got.data());
  for (int t = prompt; t < T; ++t) {
    const float* row = step.decode({0}, {toks[static_cast<std::size_t>(t)]});
    std::memcpy(got.data() + static_cast<std::size_t>(t * V), row, static_cast<std::size_t>(V) * 4);
  }
  EXPECT_EQ(step.length(0), T);
  GptDecoder chunks(cfg, dev, 1, llama_weights(1), 32);
  std::vector<float> chunked(all.size());
  chunks.prefill(0, toks.data(), T, chunked.data());
  double worst = 0, chunk_worst = 0;
  for (int t = 0; t < T; ++t) {
    const std::size_t at = static_cast<std::size_t>(t * V);
    worst = std::max(worst, max_rel_diff(got.data() + at, all.data() + at, V));
    chunk_worst = std::max(chunk_worst, max_rel_diff(chunked.data() + at, all.data() + at, V));
  }
  std::printf("prefill of %d then decode against one prefill: %.3g of the row's largest logit; chunks of 32: %.3g\n",
              prompt, worst, chunk_worst);
  EXPECT_LE(worst, 1e-5);
  EXPECT_LE(chunk_worst, 1e-5);
}

// Three sequences of different lengths decoded together (each row rotated at its own position) against each alone.
TEST(LlamaDecode, BatchOfDifferentLengthsEqualsEachAlone) {
  const GptConfig cfg = llama4();
  Device& dev = strata::test::runtime().device();
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < 3; ++b) prompts.push_back(some_tokens(3 + 20 * b, cfg.vocab, 30 + static_cast<std::uint64_t>(b)));
  GenerateOptions o;
  o.max_new_tokens = 12;
  GptDecoder batch(cfg, dev, 3, llama_weights(2));
  const Generation together = generate(batch, prompts, o);
  for (std::size_t s = 0; s < prompts.size(); ++s) {
    GptDecoder one(cfg, dev, 1, llama_weights(2));
    EXPECT_EQ(generate(one, {prompts[s]}, o).tokens[0], together.tokens[s]) << "sequence " << s;
  }
}

// The resident decoder's prefill logits and greedy tokens under `where` (3 sequences, passes of up to 24 rows).
test_data::DecodeOutputs decode_at(const DecodePlacement& where, const WeightReader& read) {
  const GptConfig cfg = llama4();
  GptDecoder dec(cfg, strata::test::runtime().device(), 3, read, 24, DType::kF32, where);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < 3; ++b) prompts.push_back(some_tokens(4 + 9 * b, cfg.vocab, 20 + static_cast<std::uint64_t>(b)));
  return test_data::prefill_then_generate(dec, some_tokens(50, cfg.vocab, 3), prompts, 16);
}

// Blocks streamed from host memory or through the reader (disk), the KV cache in host memory, and a device budget
// that keeps one block of four resident: the resident decoder's logits and tokens, bit for bit. The budget holds the
// decoder (rotary table and untied head included) to the byte.
TEST(LlamaDecode, PlacementsGiveTheResidentBits) {
  const GptConfig cfg = llama4();
  Device& dev = strata::test::runtime().device();
  const WeightReader spec = llama_weights(4);
  std::mutex lock;  // the disk stream reads two blocks at once; spec_init is pure, the lock only proves the contract
  const WeightReader read = [&](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    const std::lock_guard<std::mutex> hold(lock);
    spec(name, begin, count, out);
  };
  const test_data::DecodeOutputs resident = decode_at({}, read);
  // Room for one resident block and the two slots of prefetch 1, short of a second resident one.
  const GptDecoder all(cfg, dev, 3, read, 24);
  DecodePlacement none;
  none.resident_layers = 0;
  const std::uint64_t block =
      (all.weight_bytes() - GptDecoder(cfg, dev, 3, read, 24, DType::kF32, none).resident_weight_bytes()) / 4;
  const std::uint64_t budget = all.device_bytes() - 4 * block + 3 * block + block / 2;
  struct Case {
    int resident_layers, prefetch;
    WeightSource source;
    bool kv_on_host;
    std::uint64_t device_memory;
  };
  for (const Case& c : {Case{0, 0, WeightSource::kHost, false, 0}, Case{0, 1, WeightSource::kHost, false, 0},
                        Case{2, 2, WeightSource::kHost, false, 0}, Case{0, 1, WeightSource::kDisk, false, 0},
                        Case{1, 0, WeightSource::kDisk, true, 0}, Case{4, 1, WeightSource::kHost, true, 0},
                        Case{-1, 1, WeightSource::kHost, false, budget}}) {
    DecodePlacement where;
    where.resident_layers = c.resident_layers;
    where.prefetch_depth = c.prefetch;
    where.source = c.source;
    where.kv_on_host = c.kv_on_host;
    where.device_memory = c.device_memory;
    const std::string what = std::string(weight_source_name(c.source)) + ", " + std::to_string(c.resident_layers) +
                             " resident, prefetch " + std::to_string(c.prefetch) + (c.kv_on_host ? ", host KV" : "") +
                             (c.device_memory ? ", budget " + std::to_string(c.device_memory) : "");
    const test_data::DecodeOutputs got = decode_at(where, read);
    ASSERT_EQ(got.logits.size(), resident.logits.size());
    EXPECT_EQ(std::memcmp(got.logits.data(), resident.logits.data(), got.logits.size() * 4), 0) << what;
    EXPECT_EQ(got.tokens, resident.tokens) << what;
  }
  DecodePlacement where;
  where.device_memory = budget;
  const std::size_t before = dev.memory_stats().current_total();
  const GptDecoder dec(cfg, dev, 3, read, 24, DType::kF32, where);
  EXPECT_EQ(dec.resident_layers(), 1);
  EXPECT_LE(dec.device_bytes(), budget);
  EXPECT_EQ(dev.memory_stats().current_total() - before, dec.device_bytes());
}

// The cache holds the key-value heads: 2 x layers x kv_width floats a position (not embd), allocated for every
// sequence's context and read for each attended position; strata-plan --inference counts the same with --kv-heads.
TEST(LlamaDecode, CacheBytesFollowTheKeyValueHeads) {
  const GptConfig cfg = llama4();
  const int S = 2;
  const std::uint64_t per_position = 2ull * cfg.layers * static_cast<std::uint64_t>(cfg.kv_width()) * 4;
  ASSERT_EQ(cfg.kv_width(), 16);
  GptDecoder dec(cfg, strata::test::runtime().device(), S, llama_weights(3));
  EXPECT_EQ(dec.cache_bytes(), static_cast<std::uint64_t>(S) * static_cast<std::uint64_t>(cfg.ctx) * per_position);
  const std::vector<std::int32_t> a = some_tokens(9, cfg.vocab, 3), b = some_tokens(30, cfg.vocab, 4);
  dec.prefill(0, a.data(), 9);
  dec.prefill(1, b.data(), 30);
  const std::uint64_t before = dec.cache_bytes_read();
  dec.decode({0, 1}, {1, 2});
  EXPECT_EQ(dec.cache_bytes_read() - before, (10 + 31) * per_position);
  const InferencePlan plan = plan_inference_at(test_data::f32_plan_input(cfg, 8), S, cfg.layers, true);
  EXPECT_DOUBLE_EQ(plan.kv_bytes_per_token, static_cast<double>(per_position));
  EXPECT_DOUBLE_EQ(plan.kv_cache, static_cast<double>(dec.cache_bytes()));
  EXPECT_DOUBLE_EQ(plan.resident_weights, static_cast<double>(dec.weight_bytes()));
  // Everything it holds, the rotary table and the workspace of its widest pass included.
  EXPECT_DOUBLE_EQ(plan.total, static_cast<double>(dec.device_bytes()));
}

}  // namespace
}  // namespace strata::gpt
