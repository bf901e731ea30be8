// LlamaConfig: its checks, its exact parameter count, the presets, and the Hugging Face config.json reader.
#include "models/llama/llama_config.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_schema.h"

namespace strata::llama {

std::string LlamaConfig::problem() const {
  const std::pair<const char*, int> sizes[] = {{"layers (num_hidden_layers)", layers},
                                               {"hidden (hidden_size)", hidden},
                                               {"intermediate (intermediate_size)", intermediate},
                                               {"heads (num_attention_heads)", heads},
                                               {"kv_heads (num_key_value_heads)", kv_heads},
                                               {"head_dim", head_dim},
                                               {"vocab (vocab_size)", vocab},
                                               {"ctx (max_position_embeddings)", ctx}};
  std::string small;
  for (const auto& [field, value] : sizes)
    if (value < 1) small += fmt::format("{}{} {}", small.empty() ? "" : ", ", field, value);
  if (!small.empty()) return fmt::format("sizes must each be at least 1: {}", small);
  if (heads % kv_heads != 0)
    return fmt::format(
        "heads (num_attention_heads) {} is not a multiple of kv_heads (num_key_value_heads) {}: each "
        "key-value head serves heads / kv_heads query heads",
        heads, kv_heads);
  if (head_dim % 2 != 0)
    return fmt::format("head_dim {} is odd: RoPE rotates channel pairs (i, i + head_dim / 2)", head_dim);
  if (!(std::isfinite(rms_norm_eps) && rms_norm_eps > 0))
    return fmt::format("rms_norm_eps {} must be a finite number > 0", rms_norm_eps);
  if (!(std::isfinite(rope_theta) && rope_theta > 0))
    return fmt::format("rope_theta {} must be a finite number > 0", rope_theta);
  const cpu::RopeScaling& r = rope_scaling;
  if (r.kind == cpu::RopeScaling::kLlama3 &&
      !(std::isfinite(r.factor) && r.factor >= 1 && std::isfinite(r.high_freq_factor) && r.low_freq_factor > 0 &&
        r.low_freq_factor < r.high_freq_factor && r.original_max_position_embeddings >= 1))
    return fmt::format(
        "llama3 RoPE scaling needs factor >= 1 (got {}), 0 < low_freq_factor < high_freq_factor (got {} "
        "and {}) and original_max_position_embeddings >= 1 (got {})",
        r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings);
  return "";
}

void LlamaConfig::validate() const {
  const std::string why = problem();
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, why.empty(), "Llama config '{}': {}", name, why);
}

void LlamaConfig::validate_tp(int tp) const {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, tp >= 1, "tp {} must be at least 1", tp);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, heads % tp == 0 && intermediate % tp == 0,
                    "tp {} must divide the heads {} and the intermediate size {} (each rank holds heads / tp query "
                    "heads and intermediate / tp of the MLP)",
                    tp, heads, intermediate);
  STRATA_CHECK_CODE(
      ErrorCode::kInvalidArgument, kv_heads % tp == 0 || tp % kv_heads == 0,
      "tp {} neither divides the key-value heads {} nor is divided by them (each rank holds kv_heads / tp "
      "of them, or one shared by tp / kv_heads ranks)",
      tp, kv_heads);
}

std::int64_t LlamaConfig::parameter_count() const {
  using I = std::int64_t;
  auto mul = [](I a, I b) { return checked_mul<I>(a, b, "the Llama parameter count"); };
  auto add = [](I a, I b) { return checked_add<I>(a, b, "the Llama parameter count"); };
  const I h = hidden, q = mul(heads, head_dim), kv = mul(kv_heads, head_dim);
  I layer = 2 * h;                                   // the two RMSNorms
  layer = add(layer, mul(2, mul(h, q)));             // q and o
  layer = add(layer, mul(2, mul(h, kv)));            // k and v
  layer = add(layer, mul(3, mul(h, intermediate)));  // gate, up and down
  if (attention_bias || qkv_bias) layer = add(layer, add(q, mul(2, kv)));
  if (attention_bias) layer = add(layer, h);
  I total = mul(layers, layer);
  total = add(total, mul(tied ? 1 : 2, mul(vocab, h)));  // the token embedding, and the LM head when untied
  return add(total, h);                                  // the final RMSNorm
}

std::string LlamaConfig::describe() const {
  std::string rope = fmt::format("RoPE theta {}", rope_theta);
  if (rope_scaling.kind == cpu::RopeScaling::kLlama3)
    rope += fmt::format(" with llama3 scaling (factor {}, low {}, high {}, original {})", rope_scaling.factor,
                        rope_scaling.low_freq_factor, rope_scaling.high_freq_factor,
                        rope_scaling.original_max_position_embeddings);
  const char* bias = attention_bias ? ", q/k/v/o biases" : qkv_bias ? ", q/k/v biases" : "";
  return fmt::format(
      "{}: {} layers, hidden {}, {} heads ({} key-value) of {}, intermediate {} (SwiGLU), vocab {} {}, "
      "context {}, {}, RMSNorm eps {}{}; {} parameters",
      name.empty() ? "llama" : name, layers, hidden, heads, kv_heads, head_dim, intermediate, vocab,
      tied ? "tied" : "untied", ctx, rope, rms_norm_eps, bias, grouped_count(static_cast<double>(parameter_count())));
}

ModelShape LlamaConfig::model_shape(int seq) const {
  ModelShape m;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.vocab = vocab;
  m.seq = seq > 0 ? seq : ctx;
  m.kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.ffn = intermediate;
  m.gated = true;
  m.rms_norm = true;
  m.qkv_bias = attention_bias || qkv_bias;
  m.out_bias = attention_bias;
  m.rotary = true;
  m.tied = tied;
  return m;
}

namespace {

LlamaConfig preset(const char* name, int layers, int hidden, int heads, int kv_heads, int intermediate, int vocab,
                   int ctx, double theta) {
  LlamaConfig c;
  c.name = name;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.intermediate = intermediate;
  c.vocab = vocab;
  c.ctx = ctx;
  c.rope_theta = theta;
  c.rms_norm_eps = 1e-5;
  c.tied = false;
  return c;
}

std::vector<LlamaConfig> make_presets() {
  LlamaConfig tiny = preset("llama-tiny", 2, 32, 4, 2, 64, 64, 16, 1e4);
  // Llama 3.1 8B's config.json: its llama3 scaling stretches the 8192 positions it was trained at to 131072.
  LlamaConfig llama3 = preset("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 131072, 500000);
  llama3.rope_scaling.kind = cpu::RopeScaling::kLlama3;
  llama3.rope_scaling.factor = 8;
  llama3.rope_scaling.low_freq_factor = 1;
  llama3.rope_scaling.high_freq_factor = 4;
  llama3.rope_scaling.original_max_position_embeddings = 8192;
  LlamaConfig llama2 = preset("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 1e4);
  return {tiny, llama3, llama2};
}

}  // namespace

const std::vector<LlamaConfig>& llama_presets() {
  static const std::vector<LlamaConfig> presets = make_presets();
  return presets;
}

const LlamaConfig& find_llama_preset(const std::string& name) {
  std::string names;
  for (const LlamaConfig& c : llama_presets()) {
    if (c.name == name) return c;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "'{}' is not a Llama preset (known: {})", name, names);
}

// ---- The Hugging Face config.json reader ------------------------------------------------------------------------

namespace {

using nlohmann::json;

enum class Family { kLlama, kMistral, kQwen2 };

constexpr std::uint64_t kMaxSize = std::numeric_limits<int>::max();
constexpr double kMaxReal = std::numeric_limits<double>::max();

// The keys read, with their types and ranges; any other key is allowed (a config.json carries many).
const JsonSchema& config_schema() {
  static const JsonSchema schema = [] {
    const JsonSchema size = JsonSchema::integer(1, kMaxSize);
    const JsonSchema any_object = JsonSchema::object({}, JsonSchema::Unknown::kAllow);
    return JsonSchema::object({required("hidden_size", size),
                               required("intermediate_size", size),
                               required("num_hidden_layers", size),
                               required("num_attention_heads", size),
                               required("vocab_size", size),
                               required("max_position_embeddings", size),
                               optional("num_key_value_heads", size.or_null()),
                               optional("head_dim", size.or_null()),
                               optional("rms_norm_eps", JsonSchema::number(0, 1, true)),
                               optional("rope_theta", JsonSchema::number(0, kMaxReal, true).or_null()),
                               optional("rope_scaling", any_object.or_null()),
                               optional("rope_parameters", any_object.or_null()),
                               optional("tie_word_embeddings", JsonSchema::boolean()),
                               optional("attention_bias", JsonSchema::boolean()),
                               optional("mlp_bias", JsonSchema::boolean()),
                               optional("hidden_act", JsonSchema::string(256)),
                               optional("sliding_window", JsonSchema::integer(0, kMaxSize).or_null()),
                               optional("use_sliding_window", JsonSchema::boolean()),
                               optional("num_local_experts", JsonSchema::integer(0, kMaxSize).or_null()),
                               optional("num_experts", JsonSchema::integer(0, kMaxSize).or_null())},
                              JsonSchema::Unknown::kAllow);
  }();
  return schema;
}

// The family from .architectures (each entry) and .model_type, which must agree when both are there.
Family read_family(const json& j, const std::string& origin, std::string& architecture) {
  struct Known {
    const char* architecture;
    const char* model_type;
    Family family;
  };
  static const Known known[] = {{"LlamaForCausalLM", "llama", Family::kLlama},
                                {"MistralForCausalLM", "mistral", Family::kMistral},
                                {"Qwen2ForCausalLM", "qwen2", Family::kQwen2}};
  const char* accepted = "LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM";
  const Known* from_arch = nullptr;
  if (j.contains("architectures")) {
    for (const json& a : j.at("architectures")) {
      const std::string name = a.get<std::string>();
      const Known* k = nullptr;
      for (const Known& c : known)
        if (name == c.architecture) k = &c;
      STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, k != nullptr,
                        "{}: .architectures: '{}' is not a Llama-family architecture (accepted: {})", origin, name,
                        accepted);
      STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, from_arch == nullptr || from_arch == k,
                        "{}: .architectures: names both {} and {}", origin, from_arch->architecture, name);
      from_arch = k;
    }
  }
  const Known* from_type = nullptr;
  if (j.contains("model_type")) {
    const std::string type = j.at("model_type").get<std::string>();
    for (const Known& c : known)
      if (type == c.model_type) from_type = &c;
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, from_type != nullptr,
                      "{}: .model_type: '{}' is not a Llama-family model type (accepted: llama, mistral, qwen2)",
                      origin, type);
  }
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, from_arch != nullptr || from_type != nullptr,
                    "{}: .architectures and .model_type: missing (one of them must name the model: {})", origin,
                    accepted);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, from_arch == nullptr || from_type == nullptr || from_arch == from_type,
                    "{}: .model_type: '{}' does not match .architectures' {}", origin,
                    from_type ? from_type->model_type : "", from_arch ? from_arch->architecture : "");
  const Known* k = from_arch != nullptr ? from_arch : from_type;
  architecture = k->architecture;
  return k->family;
}

// rope_theta (top level, or 5.x's rope_parameters) and the scaling (4.x's rope_scaling, or rope_parameters when it
// has a type; where both have one, the types must agree and rope_parameters is read).
void read_rope(const json& j, const std::string& origin, LlamaConfig& c) {
  auto present = [&](const char* key) { return j.contains(key) && !j.at(key).is_null() ? &j.at(key) : nullptr; };
  const json* params = present("rope_parameters");
  const json* scaling = present("rope_scaling");
  auto type_key = [](const json* r) -> const char* {
    if (r == nullptr) return nullptr;
    return r->contains("rope_type") ? "rope_type" : r->contains("type") ? "type" : nullptr;
  };
  if (const json* theta = present("rope_theta")) c.rope_theta = theta->get<double>();
  if (params != nullptr && params->contains("rope_theta")) {
    JsonSchema::number(0, kMaxReal, true)
        .check(params->at("rope_theta"), origin, ErrorCode::kInvalidArgument, ".rope_parameters.rope_theta");
    const double theta = params->at("rope_theta").get<double>();
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, present("rope_theta") == nullptr || theta == c.rope_theta,
                      "{}: .rope_parameters.rope_theta: {} disagrees with .rope_theta {}", origin, theta, c.rope_theta);
    c.rope_theta = theta;
  }
  const bool from_params = type_key(params) != nullptr;
  const json* r = from_params ? params : scaling;
  if (r == nullptr) return;  // plain RoPE (5.x's rope_parameters may hold rope_theta alone)
  const std::string field = from_params ? "rope_parameters" : "rope_scaling";
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, type_key(r) != nullptr,
                    "{}: .rope_scaling.rope_type: missing (the RoPE scaling's type: default or llama3)", origin);
  const std::string where = "." + field + "." + type_key(r);
  JsonSchema::string(64).check(r->at(type_key(r)), origin, ErrorCode::kInvalidArgument, where);
  const std::string type = r->at(type_key(r)).get<std::string>();
  if (from_params && type_key(scaling) != nullptr) {
    const json& other = scaling->at(type_key(scaling));
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, other == type, "{}: .rope_scaling.{}: {} disagrees with {} '{}'",
                      origin, type_key(scaling), other.dump(), where, type);
  }
  if (type == "default") return;
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, type == "llama3",
                    "{}: {}: '{}' is a RoPE scaling Strata does not implement (known: default, llama3)", origin, where,
                    type);
  const JsonSchema llama3 =
      JsonSchema::object({required("factor", JsonSchema::number(1, kMaxReal)),
                          required("low_freq_factor", JsonSchema::number(0, kMaxReal, true)),
                          required("high_freq_factor", JsonSchema::number(0, kMaxReal, true)),
                          required("original_max_position_embeddings", JsonSchema::integer(1, kMaxSize))},
                         JsonSchema::Unknown::kAllow);
  llama3.check(*r, origin, ErrorCode::kInvalidArgument, "." + field);
  c.rope_scaling.kind = cpu::RopeScaling::kLlama3;
  c.rope_scaling.factor = r->at("factor").get<double>();
  c.rope_scaling.low_freq_factor = r->at("low_freq_factor").get<double>();
  c.rope_scaling.high_freq_factor = r->at("high_freq_factor").get<double>();
  c.rope_scaling.original_max_position_embeddings = r->at("original_max_position_embeddings").get<int>();
}

// What Strata's Llama block does not have: experts, an activation other than SiLU, MLP biases, a sliding window.
void refuse_unsupported(const json& j, const std::string& origin, Family family, int ctx, int seq) {
  for (const char* key : {"num_local_experts", "num_experts"}) {
    if (!j.contains(key) || j.at(key).is_null()) continue;
    const int experts = j.at(key).get<int>();
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, experts <= 1,
                      "{}: .{}: {} experts: a mixture-of-experts model, which Strata's Llama block is not", origin, key,
                      experts);
  }
  if (j.contains("hidden_act")) {
    const std::string act = j.at("hidden_act").get<std::string>();
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, act == "silu",
                      "{}: .hidden_act: '{}': Strata's Llama MLP is SwiGLU (silu)", origin, act);
  }
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, !j.value("mlp_bias", false),
                    "{}: .mlp_bias: true: Strata's Llama MLP has no biases", origin);
  // Mistral slides its window whenever sliding_window is set; Qwen2 only with use_sliding_window.
  const bool slides =
      j.contains("sliding_window") && !j.at("sliding_window").is_null() &&
      (family == Family::kMistral || (family == Family::kQwen2 && j.value("use_sliding_window", false)));
  if (!slides) return;
  const int window = j.at("sliding_window").get<int>();
  const int limit = seq > 0 ? seq : ctx;
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, window >= limit,
                    "{}: .sliding_window: {} is shorter than {} {}: its attention is windowed, which Strata's Llama "
                    "block does not do{}",
                    origin, window, seq > 0 ? "the sequence" : "max_position_embeddings", limit,
                    seq > 0 ? "" : " (a sequence no longer than the window would be exact: give it)");
}

}  // namespace

LlamaConfig from_hf_config_json(const std::string& path, int seq) {
  return from_hf_config(read_json_file(path, "Hugging Face config", std::size_t{1} << 24), path, seq);
}

LlamaConfig from_hf_config(const json& j, const std::string& path, int seq) {
  const std::string origin = "Hugging Face config " + path;
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, j.is_object(), "{}: (the top level): expected an object", origin);
  LlamaConfig c;
  // The model's name first: a config of another architecture is refused as such, not for a field it lacks.
  JsonSchema::object({optional("architectures", JsonSchema::array(JsonSchema::string(256), 16)),
                      optional("model_type", JsonSchema::string(256))},
                     JsonSchema::Unknown::kAllow)
      .check(j, origin);
  const Family family = read_family(j, origin, c.name);
  config_schema().check(j, origin);
  c.layers = j.at("num_hidden_layers").get<int>();
  c.hidden = j.at("hidden_size").get<int>();
  c.intermediate = j.at("intermediate_size").get<int>();
  c.heads = j.at("num_attention_heads").get<int>();
  c.vocab = j.at("vocab_size").get<int>();
  c.ctx = j.at("max_position_embeddings").get<int>();
  const auto int_or = [&](const char* key, int fallback) {
    return j.contains(key) && !j.at(key).is_null() ? j.at(key).get<int>() : fallback;
  };
  c.kv_heads = int_or("num_key_value_heads", c.heads);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, int_or("head_dim", 0) > 0 || c.hidden % c.heads == 0,
                    "{}: .num_attention_heads: {} does not divide .hidden_size {}, and .head_dim is missing", origin,
                    c.heads, c.hidden);
  c.head_dim = int_or("head_dim", c.hidden / c.heads);
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);  // transformers' default for all three
  c.tied = j.value("tie_word_embeddings", false);
  c.attention_bias = family == Family::kLlama && j.value("attention_bias", false);
  c.qkv_bias = family == Family::kQwen2;
  read_rope(j, origin, c);
  refuse_unsupported(j, origin, family, c.ctx, seq);
  const std::string why = c.problem();
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, why.empty(), "{}: {}", origin, why);
  return c;
}

}  // namespace strata::llama
