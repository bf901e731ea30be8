// The decode path (models/gpt/inference): its logits against PyTorch's loss on the tiny reference and its greedy
// tokens and logits against PyTorch's greedy generation, token-by-token
// decode against one pass over the whole sequence, a batch of sequences of different lengths against each alone, the
// context refused past its end; the sampler's cuts and seeds; generate()'s stop tokens and limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/gpt/data/token_data.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "runtime/inference/generator.h"
#include "runtime/inference/sampler.h"
#include "runtime/memory/inference_planner.h"
#include "tests/models/gpt/decode_test_data.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using test_data::f32_plan_input;
using test_data::max_rel_diff;
using test_data::some_tokens;
using test_data::spec_weights;

// Mean over rows of -log softmax(logits)[target], in double.
double mean_cross_entropy(const std::vector<float>& logits, const std::vector<std::int32_t>& targets, int V) {
  double sum = 0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    const float* row = logits.data() + r * static_cast<std::size_t>(V);
    const double mx = *std::max_element(row, row + V);
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
    sum += mx + std::log(z) - row[targets[r]];
  }
  return sum / static_cast<double>(targets.size());
}

// The tiny reference (tests/data, tests/reference/gpt2_reference.py): PyTorch's loss at step 0 is the mean
// cross-entropy of its first batch on the init weights. The decoder's logits, one sequence at a time, give it.
TEST(GptDecode, LogitsGivePyTorchsLossOnTheReference) {
  const nlohmann::json ref = test::load_json(test::data_dir() + "gpt_tiny_ref.json");
  const TrainConfig cfg = test::reference_config(ref, 1);
  const SafetensorsReader init(cfg.init);
  GptDecoder dec(cfg.model, strata::test::runtime().device(), 1,
                 [&](const std::string& name, std::size_t begin, std::size_t count, float* out) {
                   init.read_f32(name, begin, count, out);
                 });
  const TokenFile data = TokenFile::open(test::data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  const int B = cfg.batch, T = cfg.seq, V = cfg.model.vocab;
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(B * T)), targets(inputs.size());
  fill_batch(data, 0, 0, 1, 1, 0, B, T, inputs.data(), targets.data());
  std::vector<float> logits(inputs.size() * static_cast<std::size_t>(V));
  for (int b = 0; b < B; ++b) {
    dec.reset(0);
    dec.prefill(0, inputs.data() + b * T, T, logits.data() + static_cast<std::size_t>(b * T * V));
  }
  const double loss = mean_cross_entropy(logits, targets, V), want = ref["losses"][0].get<double>();
  std::printf("decoder loss %.9g, PyTorch %.9g: relative difference %.3g\n", loss, want, std::fabs(loss - want) / want);
  EXPECT_LE(std::fabs(loss - want) / want, test::kLossBar) << "decoder " << loss << ", PyTorch " << want;
}

// PyTorch's greedy generation on the same weights (tests/data/gpt_gen_ref.json: 64 tokens after an 8-token prompt,
// each step a full forward over the whole sequence, tests/reference/gpt2_reference.py --generate): the KV-cache
// decoder gives the same 64 tokens, every step's logits within 1e-5 of the row's largest.
TEST(GptDecode, GreedyTokensAndLogitsEqualPyTorchs) {
  const nlohmann::json ref = test::load_json(test::data_dir() + "gpt_gen_ref.json");
  const nlohmann::json& c = ref["config"];
  const GptConfig cfg{c["layers"].get<int>(), c["heads"].get<int>(), c["embd"].get<int>(), c["vocab"].get<int>(),
                      c["ctx"].get<int>()};
  const SafetensorsReader init(test::data_dir() + "gpt_gen_init.safetensors");
  GptDecoder dec(cfg, strata::test::runtime().device(), 1,
                 [&](const std::string& name, std::size_t begin, std::size_t count, float* out) {
                   init.read_f32(name, begin, count, out);
                 });
  test_data::expect_greedy_reference(dec, ref);
}

// A model whose attention spans several 64-key tiles, on the spec's init.
GptConfig wide() { return GptConfig{2, 4, 64, 96, 160}; }


// KV-cache decode, one token a step, against one pass over the whole sequence: the logits of every position within
// 1e-5 of the row's largest (f32).
TEST(GptDecode, TokenByTokenEqualsOnePass) {
  const GptConfig cfg = wide();
  Device& dev = strata::test::runtime().device();
  const int T = cfg.ctx, V = cfg.vocab;
  const std::vector<std::int32_t> toks = some_tokens(T, V, 5);
  GptDecoder whole(cfg, dev, 1, spec_weights(cfg, 1), T);
  std::vector<float> all(static_cast<std::size_t>(T * V));
  whole.prefill(0, toks.data(), T, all.data());
  GptDecoder step(cfg, dev, 1, spec_weights(cfg, 1));
  double worst = 0;
  const float* got = step.prefill(0, toks.data(), 1);
  worst = std::max(worst, max_rel_diff(got, all.data(), V));
  for (int t = 1; t < T; ++t) {
    got = step.decode({0}, {toks[static_cast<std::size_t>(t)]});
    worst = std::max(worst, max_rel_diff(got, all.data() + static_cast<std::size_t>(t * V), V));
  }
  EXPECT_EQ(step.length(0), T);
  std::printf("token by token against one pass: largest difference %.3g of the row's largest logit\n", worst);
  EXPECT_LE(worst, 1e-5);
  // A prompt in chunks of 64 rows: the same again.
  GptDecoder chunks(cfg, dev, 1, spec_weights(cfg, 1), 64);
  std::vector<float> chunked(all.size());
  chunks.prefill(0, toks.data(), T, chunked.data());
  double chunk_worst = 0;
  for (int t = 0; t < T; ++t)
    chunk_worst = std::max(chunk_worst, max_rel_diff(chunked.data() + static_cast<std::size_t>(t * V),
                                                     all.data() + static_cast<std::size_t>(t * V), V));
  std::printf("chunks of 64 against one pass: %.3g\n", chunk_worst);
  EXPECT_LE(chunk_worst, 1e-5);
}

int argmax(const float* row, int V) { return static_cast<int>(std::max_element(row, row + V) - row); }

// Three sequences of different prompt lengths decoded together, greedily, against each decoded alone: the same
// tokens, logits within 1e-5; the cache read per step is each sequence's length.
TEST(GptDecode, BatchOfDifferentLengthsEqualsEachAlone) {
  const GptConfig cfg = wide();
  Device& dev = strata::test::runtime().device();
  const int V = cfg.vocab, steps = 24;
  const std::vector<int> prompt_len = {5, 17, 70};
  auto greedy = [&](GptDecoder& dec, const std::vector<int>& which, std::vector<std::vector<int>>& out,
                    std::vector<std::vector<float>>& last_logits) {
    std::vector<std::int32_t> next;
    for (int s : which) {
      const std::vector<std::int32_t> p = some_tokens(prompt_len[static_cast<std::size_t>(s)], V, 11 + s);
      next.push_back(argmax(dec.prefill(s, p.data(), static_cast<int>(p.size())), V));
    }
    for (int i = 0; i < steps; ++i) {
      for (std::size_t j = 0; j < which.size(); ++j) out[static_cast<std::size_t>(which[j])].push_back(next[j]);
      const float* logits = dec.decode(which, next);
      for (std::size_t j = 0; j < which.size(); ++j) {
        const float* row = logits + j * static_cast<std::size_t>(V);
        next[j] = argmax(row, V);
        last_logits[static_cast<std::size_t>(which[j])].assign(row, row + V);
      }
    }
  };
  std::vector<std::vector<int>> together(3), alone(3);
  std::vector<std::vector<float>> together_logits(3), alone_logits(3);
  GptDecoder batch(cfg, dev, 3, spec_weights(cfg, 2));
  greedy(batch, {0, 1, 2}, together, together_logits);
  for (int s = 0; s < 3; ++s) {
    GptDecoder one(cfg, dev, 3, spec_weights(cfg, 2));
    greedy(one, {s}, alone, alone_logits);
    EXPECT_EQ(together[static_cast<std::size_t>(s)], alone[static_cast<std::size_t>(s)]) << "sequence " << s;
    EXPECT_LE(max_rel_diff(together_logits[static_cast<std::size_t>(s)].data(),
                           alone_logits[static_cast<std::size_t>(s)].data(), V),
              1e-5);
    EXPECT_EQ(batch.length(s), prompt_len[static_cast<std::size_t>(s)] + steps);
  }
  // Each decode step attends to every cached position plus the new one, in every layer, keys and values.
  GptDecoder count(cfg, dev, 2, spec_weights(cfg, 2));
  const std::vector<std::int32_t> a = some_tokens(9, V, 3), b = some_tokens(30, V, 4);
  count.prefill(0, a.data(), 9);
  count.prefill(1, b.data(), 30);
  const std::uint64_t before = count.cache_bytes_read(), weights_before = count.weight_bytes_read();
  count.decode({0, 1}, {1, 2});
  const std::uint64_t per_position = 2ull * cfg.layers * cfg.embd * 4;
  EXPECT_EQ(count.cache_bytes_read() - before, (10 + 31) * per_position);
  EXPECT_EQ(count.weight_bytes_read() - weights_before, count.weight_bytes());
}

// The bytes the decode steps read, weights and cache, are strata-plan --inference's prediction for the resident
// placement in f32, to the byte: a batch of 3 prompts of 40 tokens generating to the end of a 160-token context.
TEST(GptDecode, BytesPerStepAreThePlannersPrediction) {
  const GptConfig cfg = wide();
  const int P = 40, G = cfg.ctx - P, B = 3;
  GptDecoder dec(cfg, strata::test::runtime().device(), B, spec_weights(cfg, 5));
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < B; ++b) prompts.push_back(some_tokens(P, cfg.vocab, 30 + static_cast<std::uint64_t>(b)));
  GenerateOptions o;
  o.max_new_tokens = G;
  const Generation g = generate(dec, prompts, o);
  ASSERT_EQ(g.decode_steps, static_cast<std::uint64_t>(G - 1));
  const InferenceInput in = f32_plan_input(cfg, P);
  const InferencePlan plan = plan_inference_at(in, B, cfg.layers, true);
  EXPECT_DOUBLE_EQ(static_cast<double>(dec.weight_bytes()), plan.resident_weights);
  EXPECT_DOUBLE_EQ(static_cast<double>(dec.cache_bytes()), plan.kv_cache);
  const double per_step = static_cast<double>(g.decode_weight_bytes + g.decode_cache_bytes) / (G - 1);
  EXPECT_DOUBLE_EQ(per_step, plan.device_bytes);
  EXPECT_DOUBLE_EQ(per_step / B, plan.bytes_per_token);
}

TEST(GptDecode, RefusesPastTheContextAndOutsideTheVocabulary) {
  const GptConfig cfg{1, 2, 16, 32, 8};
  GptDecoder dec(cfg, strata::test::runtime().device(), 2, spec_weights(cfg, 3));
  const std::vector<std::int32_t> toks = some_tokens(9, cfg.vocab, 6);
  try {
    dec.prefill(1, toks.data(), 9);
    ADD_FAILURE() << "a prompt longer than the context was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("sequence 1: 0 positions cached and 9 more pass the model's context of 8"),
              std::string::npos)
        << e.what();
  }
  dec.prefill(1, toks.data(), 8);
  EXPECT_THROW(dec.decode({1}, {3}), Error);  // position 8 of 8
  EXPECT_EQ(dec.length(1), 8);
  const std::int32_t bad = cfg.vocab;
  EXPECT_THROW(dec.prefill(0, &bad, 1), Error);
  EXPECT_EQ(dec.length(0), 0);
  EXPECT_THROW(dec.decode({0, 0}, {1, 1}), Error);  // a sequence twice
}

// Greedy takes the first largest logit; top-k 1 is greedy at any temperature; a draw depends only on (seed,
// sequence, step); top-k and top-p keep to their sets.
TEST(GptSampler, CutsAndSeeds) {
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f, 1.5f, 0.0f};
  const int V = static_cast<int>(logits.size());
  EXPECT_EQ(sample_token(logits.data(), V, SamplingOptions{}, 0, 0), 1);
  SamplingOptions o{1.5, 1, 1.0, 7};
  for (std::uint64_t step = 0; step < 50; ++step) EXPECT_EQ(sample_token(logits.data(), V, o, 3, step), 1);
  o = SamplingOptions{1.0, 3, 1.0, 7};
  std::vector<int> seen(static_cast<std::size_t>(V), 0);
  for (std::uint64_t step = 0; step < 400; ++step) {
    const int t = sample_token(logits.data(), V, o, 0, step);
    ++seen[static_cast<std::size_t>(t)];
    EXPECT_EQ(t, sample_token(logits.data(), V, o, 0, step));  // the same draw again
  }
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
  EXPECT_GT(seen[4], 0);
  EXPECT_EQ(seen[0] + seen[3] + seen[5], 0);  // outside the top 3
  // top-p 0.5 of {2, 2, 1.5, ...} at temperature 1: the two largest already hold more than half.
  o = SamplingOptions{1.0, 0, 0.5, 9};
  for (std::uint64_t step = 0; step < 200; ++step) {
    const int t = sample_token(logits.data(), V, o, 1, step);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  // Another seed draws another sequence of tokens.
  SamplingOptions a{1.0, 0, 1.0, 1}, b{1.0, 0, 1.0, 2};
  int differ = 0;
  for (std::uint64_t step = 0; step < 64; ++step)
    differ += sample_token(logits.data(), V, a, 0, step) != sample_token(logits.data(), V, b, 0, step);
  EXPECT_GT(differ, 0);
  EXPECT_THROW((SamplingOptions{-1.0, 0, 1.0, 0}.validate()), Error);
  EXPECT_THROW((SamplingOptions{1.0, 0, 0.0, 0}.validate()), Error);
}

// generate(): each prompt's greedy tokens equal decode steps by hand; a stop token ends its sequence (kept); the
// context ends a sequence that reaches it; sampled generations repeat with their seed, and a prompt sampled alone
// under its sequence id draws what it drew in the batch.
TEST(GptGenerate, StopsAndLimits) {
  const GptConfig cfg = wide();
  Device& dev = strata::test::runtime().device();
  const std::vector<std::vector<std::int32_t>> prompts = {some_tokens(7, cfg.vocab, 21),
                                                          some_tokens(150, cfg.vocab, 22)};
  GptDecoder dec(cfg, dev, 2, spec_weights(cfg, 4));
  GenerateOptions o;
  o.max_new_tokens = 20;
  const Generation g = generate(dec, prompts, o);
  // By hand, sequence 0: prefill, then argmax and decode.
  GptDecoder by_hand(cfg, dev, 1, spec_weights(cfg, 4));
  std::vector<std::int32_t> want = {argmax(by_hand.prefill(0, prompts[0].data(), 7), cfg.vocab)};
  while (want.size() < 20) want.push_back(argmax(by_hand.decode({0}, {want.back()}), cfg.vocab));
  EXPECT_EQ(g.tokens[0], want);
  // Sequence 1 starts at 150 of 160 positions: 10 decode steps fill the context, 11 tokens in all.
  EXPECT_EQ(g.tokens[1].size(), 11u);
  EXPECT_EQ(dec.length(1), cfg.ctx);
  EXPECT_EQ(g.new_tokens, 31u);
  EXPECT_EQ(g.decode_steps, 19u);
  EXPECT_EQ(g.decode_weight_bytes, 19 * dec.weight_bytes());
  // A stop token: sequence 0 ends on its 5th token.
  o.stop_tokens = {want[4]};
  const Generation s = generate(dec, prompts, o);
  const auto first = std::find(want.begin(), want.end(), want[4]) - want.begin();
  EXPECT_EQ(s.tokens[0], std::vector<std::int32_t>(want.begin(), want.begin() + first + 1));
  EXPECT_TRUE(s.stopped[0]);
  // Sampling: the same seed, the same tokens.
  o.stop_tokens.clear();
  o.sampling = SamplingOptions{0.8, 20, 0.95, 123};
  const Generation both = generate(dec, prompts, o);
  EXPECT_EQ(both.tokens, generate(dec, prompts, o).tokens);
  // Prompt 1 alone, sampled as sequence 1 (sequence_ids: a rank's share of a request), draws the same tokens.
  GptDecoder alone(cfg, dev, 1, spec_weights(cfg, 4));
  GenerateOptions o1 = o;
  o1.sequence_ids = {1};
  EXPECT_EQ(generate(alone, {prompts[1]}, o1).tokens[0], both.tokens[1]);
  // A prompt that fills the context leaves nothing to generate.
  EXPECT_THROW(generate(dec, {some_tokens(cfg.ctx, cfg.vocab, 1)}, o), Error);
}

}  // namespace
}  // namespace strata::gpt
