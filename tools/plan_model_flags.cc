// PlanModelFlags: strata-plan's model flags and presets, resolved into a ModelShape, and the model line it prints.
#include "tools/plan_model_flags.h"

#include <fmt/format.h>
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)

#include "core/error.h"
#include "models/hf/hf_config.h"
#include "models/llama/llama_config.h"

namespace flags = strata::flags;
using strata::ModelShape;

namespace {

// GPT-2 as OpenAI released it: the tokenizer's 50257 tokens (train_gpt pads them to 50304 for its kernels:
// models/gpt/training/gpt_presets.cc), tied embeddings, 1024 learned positions.
ModelShape gpt2(int layers, int hidden, int heads) { return ModelShape{0, layers, hidden, heads, 50257, 1024}; }

}  // namespace

const std::vector<std::string>& plan_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"gpt2-124m", "gpt2-350m"};
    for (const strata::llama::LlamaConfig& c : strata::llama::llama_presets()) n.push_back(c.name);
    return n;
  }();
  return names;
}

ModelShape plan_preset(const std::string& name) {
  if (name == "gpt2-124m") return gpt2(12, 768, 12);
  if (name == "gpt2-350m") return gpt2(24, 1024, 16);
  return strata::llama::find_llama_preset(name).model_shape();
}

void PlanModelFlags::add(CLI::App& app, const std::string& seq_help, int min_seq) {
  app.add_option("--preset", preset_,
                 "a model by name, its dimensions filled in (the flags below override them; --seq defaults to its "
                 "context)")
      ->check(CLI::IsMember(plan_preset_names()));
  app.add_option("--config", config_,
                 "a Hugging Face config.json, or a model directory holding one (GPT-2 or the Llama family): the "
                 "model's family and dimensions, its exact parameter count (the flags below override them; --seq "
                 "defaults to its context)")
      ->check(CLI::ExistingPath)
      ->excludes("--preset");
  // Bounds well past any model trained (10^15 parameters, 10^5 layers): beyond them the arithmetic reports sizes no
  // machine has, and the per-layer searches take minutes.
  params_ =
      app.add_option("--params", given_.params,
                     "total parameters, above 0 and at most 1e15 (leave it out to count them from the dimensions)")
          ->check(flags::real(0, true, 1e15, false));
  auto dim = [&](const char* flag, int ModelShape::*field, const std::string& help, const CLI::Validator& check) {
    CLI::Option* o = app.add_option(flag, given_.*field, help)->check(check);
    ints_.push_back({o, field});
    return o;
  };
  const std::string needed = " (required without --preset)";
  dim("--layers", &ModelShape::layers, "transformer layers, at most 100000" + needed, flags::integer(1, 100000));
  dim("--hidden", &ModelShape::hidden, "hidden size" + needed, flags::positive_integer());
  dim("--heads", &ModelShape::heads, "attention heads" + needed, flags::positive_integer());
  dim("--kv-heads", &ModelShape::kv_heads, "key / value heads (grouped-query attention; default: --heads)",
      flags::positive_integer());
  dim("--head-dim", &ModelShape::head_dim, "channels of a head (default: --hidden / --heads)",
      flags::positive_integer());
  dim("--ffn", &ModelShape::ffn, "the MLP's inner width (default: 4 x --hidden)", flags::positive_integer());
  dim("--vocab", &ModelShape::vocab, "vocabulary", flags::non_negative_integer());
  seq_ = dim("--seq", &ModelShape::seq, seq_help + needed, flags::integer(min_seq));
  auto on = [&](const char* flag, bool ModelShape::*field, const std::string& help) {
    switches_.push_back({app.add_flag(flag, given_.*field, help), field});
  };
  on("--swiglu", &ModelShape::gated,
     "a SwiGLU MLP: gate and up [ffn, hidden], down [hidden, ffn] (default: GELU's two)");
  on("--rms-norm", &ModelShape::rms_norm,
     "Llama's layers: RMSNorms (a weight, no bias) and linears without biases (default: GPT-2's LayerNorms and "
     "biases)");
  on("--rotary", &ModelShape::rotary, "rotary positions: no position table (default: a learned one of --seq rows)");
  on("--qkv-bias", &ModelShape::qkv_bias, "with --rms-norm: q, k and v have biases (Qwen2)");
  on("--attention-bias", &ModelShape::out_bias,
     "with --rms-norm: q, k, v and the output projection have biases (Llama's attention_bias)");
  untied_flag_ = app.add_flag("--untied", untied_, "an LM head of its own (default: tied to the token embedding)");
}

ModelShape PlanModelFlags::shape() const {
  ModelShape m = !config_.empty()
                     ? strata::hf::read_hf_config(config_, seq_->count() > 0 ? given_.seq : 0).model_shape()
                 : !preset_.empty() ? plan_preset(preset_)
                                    : ModelShape{};
  const bool base = !config_.empty() || !preset_.empty();
  std::vector<std::string> missing;
  for (const auto& [option, field] : ints_) {
    if (option->count() > 0) {
      m.*field = given_.*field;
      if (field != &ModelShape::seq) m.params = 0;  // another shape: counted from its dimensions
    } else if (!base && (field == &ModelShape::layers || field == &ModelShape::hidden || field == &ModelShape::heads ||
                         field == &ModelShape::seq)) {
      missing.push_back(option->get_name());
    }
  }
  if (!missing.empty()) {
    std::string names = missing[0];
    for (std::size_t i = 1; i < missing.size(); ++i) names += (i + 1 == missing.size() ? " and " : ", ") + missing[i];
    STRATA_THROW(strata::ErrorCode::kInvalidArgument,
                 "{} {} required: give the model's dimensions, --preset NAME or --config config.json", names,
                 missing.size() == 1 ? "is" : "are");
  }
  for (const auto& [option, field] : switches_)
    if (option->count() > 0 && !(m.*field)) {
      m.*field = true;
      m.params = 0;
    }
  if (params_->count() > 0) m.params = given_.params;
  if (m.out_bias) m.qkv_bias = true;  // --attention-bias: q, k and v too
  if (untied_flag_->count() > 0 && m.tied) {
    m.tied = false;
    if (params_->count() == 0) m.params = 0;
  }
  return m;
}

std::string plan_model_text(const ModelShape& m) {
  std::string out = fmt::format("{} parameters ({:.2f}B), {} layers, hidden {}, {} heads",
                                strata::grouped_count(m.count()), m.count() / 1e9, m.layers, m.hidden, m.heads);
  if (m.kv_head_count() != m.heads || m.head_dim > 0)
    out += fmt::format(" ({} key-value) of {}", m.kv_head_count(), m.head_width());
  if (m.ffn > 0 || m.gated) out += fmt::format(", ffn {} {}", m.ffn_width(), m.gated ? "SwiGLU" : "GELU");
  if (m.rms_norm)
    out += m.out_bias ? ", RMSNorm, q/k/v/o biases" : m.qkv_bias ? ", RMSNorm, q/k/v biases" : ", RMSNorm, no biases";
  if (m.rotary) out += ", rotary positions";
  if (!m.tied) out += ", untied head";
  return out;
}
