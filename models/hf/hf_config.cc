// HfConfig: which family a config.json describes, GPT-2's fields, and the shape and count of either.
#include "models/hf/hf_config.h"

#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_schema.h"

namespace strata::hf {

namespace {

using json = nlohmann::json;

constexpr const char* kSupported = "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM";

bool is_llama_family(const std::string& name) {
  return name == "LlamaForCausalLM" || name == "MistralForCausalLM" || name == "Qwen2ForCausalLM" || name == "llama" ||
         name == "mistral" || name == "qwen2";
}

int required_size(const json& j, const char* key, const std::string& origin) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, j.contains(key), "{}: .{} is missing", origin, key);
  const json& v = j.at(key);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                    v.is_number_integer() && v.get<long long>() >= 1 && v.get<long long>() <= INT_MAX,
                    "{}: .{}: expected an integer from 1 to {}, got {}", origin, key, INT_MAX, v.dump());
  return v.get<int>();
}

// `key`, when present and not null, must be `want` (a field whose other values change the block).
void must_be(const json& j, const char* key, const json& want, const std::string& origin, const char* why) {
  if (!j.contains(key) || j.at(key).is_null()) return;
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, j.at(key) == want,
                    "{}: .{}: {} is not supported ({}; Strata's GPT-2 "
                    "block needs {})",
                    origin, key, j.at(key).dump(), why, want.dump());
}

Gpt2Config read_gpt2(const json& j, const std::string& origin) {
  Gpt2Config c;
  c.layers = required_size(j, "n_layer", origin);
  c.hidden = required_size(j, "n_embd", origin);
  c.heads = required_size(j, "n_head", origin);
  c.vocab = required_size(j, "vocab_size", origin);
  c.ctx = required_size(j, j.contains("n_positions") ? "n_positions" : "n_ctx", origin);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, c.hidden % c.heads == 0, "{}: .n_head: {} does not divide .n_embd {}",
                    origin, c.heads, c.hidden);
  must_be(j, "layer_norm_epsilon", 1e-5, origin, "the LayerNorms' epsilon is GPT-2's");
  must_be(j, "activation_function", "gelu_new", origin, "the MLP's GELU is the tanh approximation");
  if (j.contains("n_inner") && !j.at("n_inner").is_null())
    must_be(j, "n_inner", 4 * c.hidden, origin, "the MLP is 4 n_embd wide");
  must_be(j, "tie_word_embeddings", true, origin, "the LM head is the token embedding");
  must_be(j, "scale_attn_weights", true, origin, "scores are scaled by 1 / sqrt(head size)");
  must_be(j, "scale_attn_by_inverse_layer_idx", false, origin, "no per-layer scaling of the scores");
  must_be(j, "reorder_and_upcast_attn", false, origin, "one attention order");
  must_be(j, "add_cross_attention", false, origin, "a decoder without cross attention");
  return c;
}

}  // namespace

std::string config_json_path(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) ? path + "/config.json" : path;
}

HfConfig read_hf_config(const std::string& path, int seq) {
  HfConfig c;
  c.path = config_json_path(path);
  const std::string origin = "Hugging Face config " + c.path;
  const json j = read_json_file(c.path, "Hugging Face config", std::size_t{1} << 24);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, j.is_object(), "{}: (the top level): expected an object", origin);
  // The architecture: .architectures' names and .model_type must all name one family.
  std::string type = j.contains("model_type") && j.at("model_type").is_string() ? j.at("model_type").get<std::string>()
                                                                                : std::string();
  bool gpt2 = type == "gpt2", llama = is_llama_family(type);
  std::string named = type;
  if (j.contains("architectures") && j.at("architectures").is_array())
    for (const json& a : j.at("architectures")) {
      const std::string name = a.is_string() ? a.get<std::string>() : a.dump();
      named = name;
      const bool is_gpt2 = name == "GPT2LMHeadModel", is_llama = is_llama_family(name);
      STRATA_CHECK_CODE(ErrorCode::kUnsupported, is_gpt2 || is_llama,
                        "{}: .architectures: '{}' is not an architecture Strata trains ({})", origin, name, kSupported);
      gpt2 = gpt2 || is_gpt2;
      llama = llama || is_llama;
    }
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, gpt2 || llama,
                    "{}: model_type '{}' is not an architecture Strata trains ({})", origin,
                    type.empty() ? "(none)" : type, kSupported);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, gpt2 != llama,
                    "{}: .architectures and .model_type name both GPT-2 and a Llama-family model", origin);
  c.architecture = named;
  c.gpt2 = gpt2;
  if (gpt2)
    c.gpt = read_gpt2(j, origin);
  else
    c.llama = llama::from_hf_config(j, c.path, seq);
  return c;
}

namespace {

// The planner's shape of the config at sequence length `seq` (0: the context), its count from the dimensions.
ModelShape shape_at(const HfConfig& c, int seq) {
  if (!c.gpt2) return c.llama.model_shape(seq);
  ModelShape m;
  m.layers = c.gpt.layers;
  m.hidden = c.gpt.hidden;
  m.heads = c.gpt.heads;
  m.vocab = c.gpt.vocab;
  m.seq = seq > 0 ? seq : c.gpt.ctx;
  return m;
}

}  // namespace

std::int64_t HfConfig::parameter_count() const {
  // GPT-2's position table has ctx rows: counted at the context, not at the sequence length planned.
  return gpt2 ? static_cast<std::int64_t>(shape_at(*this, gpt.ctx).count()) : llama.parameter_count();
}

ModelShape HfConfig::model_shape(int seq) const {
  ModelShape m = shape_at(*this, seq);
  m.params = static_cast<double>(parameter_count());  // exact, whatever the sequence length planned
  return m;
}

}  // namespace strata::hf
