// check_shapes, config_from_shapes and llama_config_from_record: the model of a file or a checkpoint.
#include "models/gpt/model/model_record.h"

#include "core/error.h"

namespace strata::gpt {

// Every parameter of the model `cfg`, with its shape (gpt_units' names; null: absent): a file of another model is
// refused here, naming the tensor.
void check_shapes(const GptConfig& cfg, const ShapeOf& shape, const std::string& source) {
  for (const UnitSpec& u : gpt_units(cfg, 1))
    for (const SlotSpec& s : u.slots) {
      const std::vector<std::int64_t>* got = shape(s.name);
      STRATA_CHECK_CODE(ErrorCode::kIo, got && *got == s.shape,
                        "{}: tensor '{}' {} (a {}-layer, {}-wide model needs it)", source, s.name,
                        got ? "has another shape" : "is missing", cfg.layers, cfg.embd);
    }
}

// Shapes by parameter name -> the GPT's dimensions: layers (h.{i}.ln_1.weight), embd and vocab (wte), ctx (wpe).
GptConfig config_from_shapes(const ShapeOf& shape, int heads, const std::string& source) {
  const std::vector<std::int64_t>* wte = shape("wte.weight");
  const std::vector<std::int64_t>* wpe = shape("wpe.weight");
  STRATA_CHECK_CODE(ErrorCode::kIo, wte && wpe && wte->size() == 2 && wpe->size() == 2,
                    "{}: no 2-D wte.weight and wpe.weight: not the weights of this GPT (docs/gpt-model.md)", source);
  GptConfig cfg;
  cfg.vocab = static_cast<int>((*wte)[0]);
  cfg.embd = static_cast<int>((*wte)[1]);
  cfg.ctx = static_cast<int>((*wpe)[0]);
  cfg.layers = 0;
  while (shape("h." + std::to_string(cfg.layers) + ".ln_1.weight")) ++cfg.layers;
  STRATA_CHECK(heads > 0, "{}: the attention heads are not in the file: give --heads", source);
  cfg.heads = heads;
  cfg.validate();
  check_shapes(cfg, shape, source);
  return cfg;
}

// A Llama-style model's shape from a checkpoint's record of its training run (TrainConfig::to_json's config.model).
GptConfig llama_config_from_record(const nlohmann::json& m, const std::string& source) {
  auto field = [&](const char* key, bool boolean) -> const nlohmann::json& {
    STRATA_CHECK_CODE(ErrorCode::kIo, m.contains(key) && (boolean ? m[key].is_boolean() : m[key].is_number()),
                      "{}: the trainer state's config.model.{} is missing or not a {} (a Llama-style run records it)",
                      source, key, boolean ? "boolean" : "number");
    return m[key];
  };
  auto dim = [&](const char* key) { return field(key, false).get<int>(); };
  GptConfig cfg{dim("layers"), dim("heads"), dim("embd"), dim("vocab"), dim("ctx")};
  cfg.family = Family::kLlama;
  cfg.kv_heads = dim("kv_heads");
  cfg.head_dim = dim("head_dim");
  cfg.ffn = dim("ffn");
  cfg.norm_eps = field("norm_eps", false).get<float>();
  cfg.rope_theta = field("rope_theta", false).get<double>();
  cfg.qkv_bias = field("qkv_bias", true).get<bool>();
  cfg.tied = field("tied", true).get<bool>();
  // "none", or llama3's factors (TrainConfig::to_json).
  if (m.contains("rope_scaling") && m["rope_scaling"].is_object()) {
    const nlohmann::json& r = m["rope_scaling"];
    STRATA_CHECK_CODE(ErrorCode::kIo, r.value("rope_type", "") == "llama3",
                      "{}: the trainer state's config.model.rope_scaling is of a type this build does not know: {}",
                      source, r.dump());
    cfg.rope_scaling.kind = cpu::RopeScaling::kLlama3;
    cfg.rope_scaling.factor = r.at("factor").get<double>();
    cfg.rope_scaling.low_freq_factor = r.at("low_freq_factor").get<double>();
    cfg.rope_scaling.high_freq_factor = r.at("high_freq_factor").get<double>();
    cfg.rope_scaling.original_max_position_embeddings = r.at("original_max_position_embeddings").get<int>();
  }
  cfg.validate();
  return cfg;
}

}  // namespace strata::gpt
