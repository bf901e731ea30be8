// LlamaConfig tests: the presets' exact parameter counts (and the planner's, GPT-2 124M's among them), the checks of
// validate() and validate_tp(), and Hugging Face config.json files of each accepted form (transformers 4.x and 5.x,
// Llama, Mistral, Qwen2, tied and untied) and each refusal, whose message names the file, the field and the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "models/llama/llama_config.h"
#include "runtime/memory/memory_planner.h"

namespace strata::llama {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- Presets and counts ---------------------------------------------------------------------------------------

TEST(LlamaConfig, PresetsCountExactly) {
  // llama-tiny: 2 x (2 x 32 + 32 x 32 + 2 x 32 x 16 + 32 x 32 + 3 x 32 x 64) + 2 x 64 x 32 + 32.
  EXPECT_EQ(find_llama_preset("llama-tiny").parameter_count(), 22688);
  EXPECT_EQ(find_llama_preset("llama3-8b").parameter_count(), 8030261248);
  EXPECT_EQ(find_llama_preset("llama2-70b").parameter_count(), 68976648192);
  for (const LlamaConfig& c : llama_presets()) {
    EXPECT_EQ(c.problem(), "") << c.name;
    // The planner's shape counts the same, to the parameter.
    EXPECT_EQ(c.model_shape().count(), static_cast<double>(c.parameter_count())) << c.name;
    EXPECT_EQ(c.model_shape(128).count(), static_cast<double>(c.parameter_count())) << c.name;  // rotary: no table
  }
  EXPECT_THAT(find_llama_preset("llama2-70b").describe(), HasSubstr("68,976,648,192 parameters"));
  const LlamaConfig& l3 = find_llama_preset("llama3-8b");
  EXPECT_EQ(l3.rope_scaling.kind, cpu::RopeScaling::kLlama3);
  EXPECT_EQ(l3.rope_scaling.factor, 8);
  EXPECT_EQ(l3.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(l3.rope_theta, 500000);
  EXPECT_EQ(l3.ctx, 131072);
  EXPECT_EQ(l3.head_dim, 128);
  EXPECT_THAT([] { find_llama_preset("llama4"); }, ::testing::Throws<Error>());
}

TEST(LlamaConfig, PlannerCountsGpt2Unchanged) {
  // GPT-2 124M (tied, 1024 learned positions) through the same ModelShape: the GPT-2 defaults.
  EXPECT_EQ(ModelShape({0, 12, 768, 12, 50257, 1024}).count(), 124439808.0);
  EXPECT_EQ(grouped_count(124439808.0), "124,439,808");
  EXPECT_EQ(grouped_count(68976648192.0), "68,976,648,192");
  EXPECT_EQ(grouped_count(999), "999");
  EXPECT_EQ(grouped_count(1000), "1,000");
}

// Megatron's split of a Llama block: q, o and the MLP divide by tp; k and v divide while tp divides the kv heads, and
// are replicated (one head a rank) beyond; the norms are on every rank. Summed back over the ranks to the whole model.
TEST(LlamaConfig, PlannerSplitsOverTensorParallelRanks) {
  const LlamaConfig& c = find_llama_preset("llama2-70b");
  const ModelShape m = c.model_shape(4096);
  const double h = c.hidden, L = c.layers, norms = L * 2 * h + h;
  EXPECT_EQ(8 * m.count_per_rank(8) - 7 * norms, m.count());  // 8 kv heads: one a rank, nothing replicated but norms
  EXPECT_EQ(m.kv_heads_per_rank(16), 1);
  const double kv_copies = (16 - 8) * L * 2 * h * c.head_dim;  // k and v of 8 heads held twice over 16 ranks
  EXPECT_EQ(16 * m.count_per_rank(16) - 15 * norms - kv_copies, m.count());
  EXPECT_EQ(m.count_per_rank(1), m.count());
  // The planner's checks: kv heads and the MLP's width as well as the heads.
  PlanInput in;
  in.model = m;
  in.layout.tp = 16;
  in.hardware.devices_per_node = 16;
  EXPECT_NO_THROW(in.validate());
  in.layout.tp = 2;
  in.model.kv_heads = 3;
  EXPECT_THAT([&] { in.validate(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--kv-heads 3 must divide --heads 64")));
  in.model.kv_heads = 8;
  in.model.ffn = 28671;
  EXPECT_THAT([&] { in.validate(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--tp 2 must divide the MLP's width 28671")));
}

// ---- validate() and validate_tp() ---------------------------------------------------------------------------------

std::string validate_error(const LlamaConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string tp_error(const LlamaConfig& c, int tp) {
  try {
    c.validate_tp(tp);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LlamaConfig, ValidateNamesTheFieldAndValues) {
  LlamaConfig c = find_llama_preset("llama-tiny");
  EXPECT_NO_THROW(c.validate());
  c.kv_heads = 3;
  EXPECT_THAT(validate_error(c), AllOf(HasSubstr("heads (num_attention_heads) 4"),
                                       HasSubstr("not a multiple of kv_heads (num_key_value_heads) 3")));
  c = find_llama_preset("llama-tiny");
  c.head_dim = 7;
  EXPECT_THAT(validate_error(c), HasSubstr("head_dim 7 is odd"));
  c = find_llama_preset("llama-tiny");
  c.layers = 0;
  c.intermediate = -4;
  EXPECT_THAT(validate_error(c),
              AllOf(HasSubstr("layers (num_hidden_layers) 0"), HasSubstr("intermediate (intermediate_size) -4")));
  c = find_llama_preset("llama-tiny");
  c.rope_theta = 0;
  EXPECT_THAT(validate_error(c), HasSubstr("rope_theta 0"));
  c = find_llama_preset("llama3-8b");
  c.rope_scaling.low_freq_factor = 4;
  EXPECT_THAT(validate_error(c), HasSubstr("low_freq_factor < high_freq_factor (got 4 and 4)"));
}

TEST(LlamaConfig, ValidateTpNamesTheValues) {
  const LlamaConfig& c = find_llama_preset("llama2-70b");  // 64 heads, 8 kv heads, intermediate 28672
  for (int tp : {1, 2, 4, 8, 16, 32, 64}) EXPECT_EQ(tp_error(c, tp), "(accepted)") << tp;
  EXPECT_THAT(tp_error(c, 3), AllOf(HasSubstr("tp 3 must divide the heads 64 and the intermediate size 28672")));
  EXPECT_THAT(tp_error(c, 0), HasSubstr("tp 0 must be at least 1"));
  LlamaConfig odd = find_llama_preset("llama-tiny");  // 4 heads, 2 kv heads
  odd.heads = 12;
  odd.kv_heads = 4;
  odd.intermediate = 96;
  EXPECT_EQ(tp_error(odd, 12), "(accepted)");  // a multiple of the kv heads: each shared by 3 ranks
  EXPECT_THAT(tp_error(odd, 6), AllOf(HasSubstr("tp 6 neither divides the key-value heads 4 nor is divided by them")));
  odd.intermediate = 90;
  EXPECT_THAT(tp_error(odd, 4), HasSubstr("the intermediate size 90"));
}

// ---- Hugging Face config.json ---------------------------------------------------------------------------------

class HfConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("strata_llama_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `j` (or `text`) as <dir>/<name>.json and returns its path.
  std::string write(const json& j, const std::string& name = "config") { return write_text(j.dump(2), name); }
  std::string write_text(const std::string& text, const std::string& name) {
    const std::string path = (dir_ / (name + ".json")).string();
    std::ofstream(path) << text;
    return path;
  }
  LlamaConfig read(const json& j, int seq = 0) { return from_hf_config_json(write(j), seq); }
  // The message of the refusal of `j`, which names the file; "(accepted)" when it was read.
  std::string refusal(const json& j, int seq = 0) {
    const std::string path = write(j, "refused");
    try {
      from_hf_config_json(path, seq);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_THAT(what, HasSubstr(path));
      return what;
    }
    return "(accepted)";
  }

  fs::path dir_;
};

// Llama 3.1 8B's config.json as transformers 4.43+ writes it.
json llama31_8b_v4() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

void expect_llama3_8b(const LlamaConfig& c) {
  EXPECT_EQ(c.name, "LlamaForCausalLM");
  EXPECT_EQ(c.parameter_count(), 8030261248);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.kv_heads, 8);
  EXPECT_FALSE(c.tied);
  EXPECT_EQ(c.rope_theta, 500000);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_scaling.kind, cpu::RopeScaling::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 8);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST_F(HfConfig, Llama31WithLlama3ScalingAsTransformers4Writes) {
  expect_llama3_8b(read(llama31_8b_v4()));
  json older = llama31_8b_v4();  // some 4.x files say "type" rather than "rope_type"
  older["rope_scaling"].erase("rope_type");
  older["rope_scaling"]["type"] = "llama3";
  expect_llama3_8b(read(older));
}

TEST_F(HfConfig, RopeParametersAsTransformers5Writes) {
  json j = llama31_8b_v4();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_theta", 500000.0},  {"rope_type", "llama3"},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  j["transformers_version"] = "5.0.0";
  expect_llama3_8b(read(j));
  // Plain RoPE: {"rope_theta": ..., "rope_type": "default"}, with rope_scaling null beside it.
  json plain = llama31_8b_v4();
  plain.erase("rope_theta");
  plain["rope_scaling"] = nullptr;
  plain["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
  const LlamaConfig c = read(plain);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.rope_scaling.kind, cpu::RopeScaling::kNone);
  EXPECT_EQ(c.parameter_count(), 8030261248);
}

TEST_F(HfConfig, TiedLlamaAndAttentionBias) {
  // Llama 3.2 1B: tied embeddings, head_dim 64.
  json j = llama31_8b_v4();
  j["hidden_size"] = 2048;
  j["num_hidden_layers"] = 16;
  j["intermediate_size"] = 8192;
  j["head_dim"] = 64;
  j["tie_word_embeddings"] = true;
  j["rope_scaling"]["factor"] = 32.0;
  const LlamaConfig tied = read(j);
  EXPECT_TRUE(tied.tied);
  EXPECT_EQ(tied.parameter_count(), 1235814400);
  EXPECT_EQ(tied.model_shape().count(), 1235814400.0);
  // Llama's attention_bias: q, k, v and o biases (2048 + 2 x 512 + 2048 a layer).
  j["attention_bias"] = true;
  const LlamaConfig biased = read(j);
  EXPECT_TRUE(biased.attention_bias);
  EXPECT_EQ(biased.parameter_count(), 1235814400 + 16 * (2048 + 2 * 512 + 2048));
  EXPECT_EQ(biased.model_shape().count(), static_cast<double>(biased.parameter_count()));
}

// Mistral 7B v0.2 (no sliding window), and v0.1's 4096-token window: refused against its 32768 positions, read for a
// sequence it covers.
json mistral_7b() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.36.0", "vocab_size": 32000})");
}

TEST_F(HfConfig, Mistral) {
  const LlamaConfig c = read(mistral_7b());
  EXPECT_EQ(c.name, "MistralForCausalLM");
  EXPECT_EQ(c.parameter_count(), 7241732096);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.attention_bias || c.qkv_bias);
  json v01 = mistral_7b();
  v01["sliding_window"] = 4096;
  EXPECT_THAT(refusal(v01), AllOf(HasSubstr(".sliding_window: 4096 is shorter than max_position_embeddings 32768")));
  EXPECT_THAT(refusal(v01, 8192), HasSubstr(".sliding_window: 4096 is shorter than the sequence 8192"));
  EXPECT_EQ(read(v01, 4096).parameter_count(), 7241732096);
}

// Qwen2.5 0.5B: q, k and v biases, tied, a sliding window that is off.
json qwen25_05b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 896,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

TEST_F(HfConfig, Qwen2) {
  const LlamaConfig c = read(qwen25_05b());
  EXPECT_EQ(c.name, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.tied);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.parameter_count(), 494032768);
  EXPECT_EQ(c.model_shape().count(), 494032768.0);
  json windowed = qwen25_05b();
  windowed["use_sliding_window"] = true;
  windowed["sliding_window"] = 4096;
  EXPECT_THAT(refusal(windowed), HasSubstr(".sliding_window: 4096 is shorter than max_position_embeddings 32768"));
}

TEST_F(HfConfig, RefusesOtherModelsNamingThem) {
  json mixtral = mistral_7b();
  mixtral["architectures"] = {"MixtralForCausalLM"};
  mixtral["model_type"] = "mixtral";
  EXPECT_THAT(refusal(mixtral), HasSubstr(".architectures: 'MixtralForCausalLM' is not a Llama-family architecture"));
  json gpt2 = json::parse(R"({"model_type": "gpt2", "n_embd": 768, "n_layer": 12})");
  EXPECT_THAT(refusal(gpt2), HasSubstr(".model_type: 'gpt2' is not a Llama-family model type"));
  json unnamed = llama31_8b_v4();
  unnamed.erase("architectures");
  unnamed.erase("model_type");
  EXPECT_THAT(refusal(unnamed), HasSubstr(".architectures and .model_type: missing"));
  json mismatched = llama31_8b_v4();
  mismatched["model_type"] = "qwen2";
  EXPECT_THAT(refusal(mismatched), HasSubstr(".model_type: 'qwen2' does not match .architectures' LlamaForCausalLM"));
}

TEST_F(HfConfig, RefusesExpertsAndWhatTheBlockLacks) {
  json moe = llama31_8b_v4();
  moe["num_local_experts"] = 8;
  EXPECT_THAT(refusal(moe), HasSubstr(".num_local_experts: 8 experts: a mixture-of-experts model"));
  json qwen_moe = qwen25_05b();
  qwen_moe["num_experts"] = 60;
  EXPECT_THAT(refusal(qwen_moe), HasSubstr(".num_experts: 60 experts"));
  json one_expert = llama31_8b_v4();
  one_expert["num_local_experts"] = 1;
  EXPECT_EQ(read(one_expert).parameter_count(), 8030261248);
  json gelu = llama31_8b_v4();
  gelu["hidden_act"] = "gelu";
  EXPECT_THAT(refusal(gelu), HasSubstr(".hidden_act: 'gelu'"));
  json mlp_bias = llama31_8b_v4();
  mlp_bias["mlp_bias"] = true;
  EXPECT_THAT(refusal(mlp_bias), HasSubstr(".mlp_bias: true"));
}

TEST_F(HfConfig, RefusesRopeScalingItDoesNotKnow) {
  json linear = llama31_8b_v4();
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(refusal(linear), HasSubstr(".rope_scaling.type: 'linear' is a RoPE scaling Strata does not implement"));
  json yarn = llama31_8b_v4();
  yarn.erase("rope_scaling");
  yarn["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(refusal(yarn), HasSubstr(".rope_parameters.rope_type: 'yarn'"));
  json untyped = llama31_8b_v4();
  untyped["rope_scaling"].erase("rope_type");
  EXPECT_THAT(refusal(untyped), HasSubstr(".rope_scaling.rope_type: missing"));
  json incomplete = llama31_8b_v4();
  incomplete["rope_scaling"].erase("factor");
  EXPECT_THAT(refusal(incomplete), HasSubstr(".rope_scaling.factor: missing"));
  json disagree = llama31_8b_v4();
  disagree["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
  EXPECT_THAT(refusal(disagree), HasSubstr(".rope_parameters.rope_theta: 10000 disagrees with .rope_theta 500000"));
}

TEST_F(HfConfig, RefusesMissingAndMistypedFields) {
  json missing = llama31_8b_v4();
  missing.erase("intermediate_size");
  EXPECT_THAT(refusal(missing), HasSubstr(".intermediate_size: missing"));
  json text = llama31_8b_v4();
  text["hidden_size"] = "4096";
  EXPECT_THAT(refusal(text), HasSubstr(".hidden_size: expected an integer"));
  json zero = llama31_8b_v4();
  zero["num_hidden_layers"] = 0;
  EXPECT_THAT(refusal(zero), HasSubstr(".num_hidden_layers: expected an integer in [1,"));
  json kv = llama31_8b_v4();
  kv["num_key_value_heads"] = 5;
  EXPECT_THAT(refusal(kv), HasSubstr("heads (num_attention_heads) 32 is not a multiple of kv_heads "
                                     "(num_key_value_heads) 5"));
  json odd = llama31_8b_v4();
  odd["head_dim"] = 127;
  EXPECT_THAT(refusal(odd), HasSubstr("head_dim 127 is odd"));
  // Defaults where a field is absent: kv heads = heads, head_dim = hidden / heads, untied, plain RoPE at 10000.
  json sparse = json::parse(R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 64, "max_position_embeddings": 16})");
  const LlamaConfig c = read(sparse);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_FALSE(c.tied);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.rope_scaling.kind, cpu::RopeScaling::kNone);
  EXPECT_EQ(c.name, "LlamaForCausalLM");
  EXPECT_THAT(refusal(json::array()), HasSubstr("expected an object"));
  EXPECT_THAT([&] { from_hf_config_json((dir_ / "absent.json").string()); }, ::testing::Throws<Error>());
}

}  // namespace
}  // namespace strata::llama
