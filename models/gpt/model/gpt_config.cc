// GptConfig's checks and description, for both families.
#include <cmath>

#include "core/checked_math.h"
#include "core/error.h"
#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

const char* family_name(Family family) { return family == Family::kLlama ? "llama" : "gpt2"; }

GptConfig llama_model(const llama::LlamaConfig& c) {
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, !c.attention_bias,
                    "{}: attention_bias (biases on q, k, v and o) is not built; Qwen2's q, k, v biases are",
                    c.name.empty() ? "the model" : c.name);
  GptConfig m(c.layers, c.heads, c.hidden, c.vocab, c.ctx);
  m.family = Family::kLlama;
  m.kv_heads = c.kv_heads;
  m.head_dim = c.head_dim;
  m.ffn = c.intermediate;
  m.norm_eps = static_cast<float>(c.rms_norm_eps);
  m.rope_theta = c.rope_theta;
  m.rope_scaling = c.rope_scaling;
  m.qkv_bias = c.qkv_bias;
  m.tied = c.tied;
  return m;
}

Family parse_family(const std::string& name) {
  if (name == "gpt2") return Family::kGpt2;
  if (name == "llama") return Family::kLlama;
  STRATA_THROW(ErrorCode::kInvalidArgument, "--family '{}' is not a model family (known: gpt2, llama)", name);
}

void GptConfig::validate() const {
  STRATA_CHECK(layers >= 1, "--layers {} must be at least 1", layers);
  STRATA_CHECK(vocab >= 2, "--vocab {} must be at least 2", vocab);
  STRATA_CHECK(ctx >= 1, "--ctx {} must be at least 1", ctx);
  if (!llama()) {
    STRATA_CHECK(heads >= 1 && embd >= 1 && embd % heads == 0, "--embd {} must be a positive multiple of --heads {}",
                 embd, heads);
    // GPT-2's shape is fixed by its flags: the Llama-style fields keep their defaults.
    STRATA_CHECK((kv_heads == 0 || kv_heads == heads) && (head_dim == 0 || head_dim == embd / heads) &&
                     (ffn == 0 || ffn == 4 * embd) && tied && !qkv_bias,
                 "a GPT-2 model has as many key-value heads as heads, heads of embd / heads channels, an MLP of 4 x "
                 "embd, a tied head and biases everywhere (kv_heads {}, head_dim {}, ffn {}, tied {}, qkv_bias {})",
                 kv_heads, head_dim, ffn, tied, qkv_bias);
    return;
  }
  STRATA_CHECK(heads >= 1 && embd >= 1, "num_attention_heads {} and hidden_size {} must be at least 1", heads, embd);
  STRATA_CHECK(kv_heads >= 0 && kv_heads <= heads, "num_key_value_heads {} must be in [1, num_attention_heads {}]",
               kv_heads, heads);
  STRATA_CHECK(heads % kv() == 0,
               "num_attention_heads {} must divide by num_key_value_heads {} (each key-value head serves a group of "
               "query heads)",
               heads, kv());
  STRATA_CHECK(head_dim > 0 || embd % heads == 0,
               "hidden_size {} must divide by num_attention_heads {} when head_dim is not given", embd, heads);
  STRATA_CHECK(hd() >= 2 && hd() % 2 == 0, "head_dim {} must be even (rotary embeddings rotate channel pairs)", hd());
  STRATA_CHECK(ffn >= 1, "intermediate_size {} must be at least 1", ffn);
  STRATA_CHECK(norm_eps > 0 && std::isfinite(norm_eps), "rms_norm_eps {} must be positive", norm_eps);
  STRATA_CHECK(rope_theta > 0 && std::isfinite(rope_theta), "rope_theta {} must be positive", rope_theta);
}

void GptConfig::validate_tp(int tp, bool sequence_parallel, int seq) const {
  STRATA_CHECK(tp >= 1, "--tp {} must be at least 1", tp);
  if (llama()) {
    STRATA_CHECK(kv() % tp == 0 || tp % kv() == 0,
                 "--tp {} neither divides the {} key-value heads nor is divided by them: each tp rank holds whole "
                 "key-value heads, or a share of the ranks holds each one",
                 tp, kv());
    STRATA_CHECK(heads % tp == 0 && ffn % tp == 0,
                 "--heads {} and --ffn {} must divide by --tp {} (each tensor-parallel rank holds whole heads and a "
                 "share of the MLP)",
                 heads, ffn, tp);
    STRATA_CHECK(!sequence_parallel || seq % tp == 0,
                 "--seq {} must divide by --tp {} under --sequence-parallel (each rank holds seq / tp positions)", seq,
                 tp);
    return;
  }
  STRATA_CHECK(heads % tp == 0, "--heads {} must divide by --tp {} (each tensor-parallel rank holds whole heads)",
               heads, tp);
  STRATA_CHECK(embd % tp == 0, "--embd {} must divide by --tp {}", embd, tp);
  STRATA_CHECK(!sequence_parallel || seq % tp == 0,
               "--seq {} must divide by --tp {} under --sequence-parallel (each rank holds seq / tp positions)", seq,
               tp);
}

void GptConfig::validate_sizes(int batch, int seq, int tp) const {
  STRATA_CHECK(batch >= 1 && seq >= 1 && tp >= 1, "--batch {}, --seq {} and --tp {} must be at least 1", batch, seq,
               tp);
  // The kernels index rows with int: batch x seq must fit one.
  const int rows = checked_mul<int>(batch, seq, "tokens per micro-batch (--batch x --seq)");
  const std::uint64_t C = static_cast<std::uint64_t>(embd), Cl = C / static_cast<std::uint64_t>(tp);
  const std::uint64_t Vl = static_cast<std::uint64_t>(vocab_per_rank(*this, tp));
  // Parameters on one rank: per block 12 C^2 / tp + 13 C for GPT-2 (at least the split's share; a Llama-style block
  // has (2 q_width + 2 kv_width + 3 ffn) C / tp, bounded the same way), wte's rows and wpe (ln_f's 2 C is within the
  // bound's slack). Every later size is a small multiple of one of these.
  const std::uint64_t widths = static_cast<std::uint64_t>(2 * static_cast<std::int64_t>(q_width()) +
                                                          2 * static_cast<std::int64_t>(kv_width()) +
                                                          3 * static_cast<std::int64_t>(mlp_width()));
  const std::uint64_t matrices =
      llama() ? checked_product("a block's parameters (its widths x hidden_size / --tp)", widths, Cl)
              : checked_product("a block's parameters (12 x --embd x --embd / --tp)", 12, C, Cl);
  const std::uint64_t block = checked_add<std::uint64_t>(
      matrices, checked_product("a block's vectors (13 x --embd)", 13, C), "a block's parameters");
  std::uint64_t params = checked_product("the blocks' parameters (--layers x a block)", layers, block);
  params = checked_add<std::uint64_t>(params, checked_product("wte (--vocab / --tp x --embd)", Vl, C), "parameters");
  params = checked_add<std::uint64_t>(params, checked_product("wpe (--ctx x --embd)", ctx, C), "parameters");
  // f32 parameters, their gradients and AdamW's two moments: 16 bytes each when nothing is sharded.
  check_addressable(checked_product("the parameters' f32 state (16 bytes x parameters)", 16, params),
                    fmt::format("{} parameters per rank (f32 weights, gradients and AdamW moments)", params).c_str());
  // Activations kept for the backward: about 16 [rows, C] arrays per block (GPT-2; a Llama-style block keeps its
  // widths' worth), plus the logits [rows, vocab / tp].
  const std::uint64_t acts =
      llama() ? checked_product("the activations (4 bytes x (layers + 1) x --batch x --seq x a block's widths)", 4,
                                static_cast<std::uint64_t>(layers) + 1, rows, widths)
              : checked_product("the activations (4 bytes x (--layers + 1) x --batch x --seq x 16 x --embd)", 4,
                                static_cast<std::uint64_t>(layers) + 1, rows, 16, C);
  const std::uint64_t logits = checked_product("the logits (4 bytes x --batch x --seq x --vocab / --tp)", 4, rows, Vl);
  check_addressable(checked_add<std::uint64_t>(acts, logits, "activations and logits"),
                    fmt::format("the activations of {} rows x {} tokens (--batch x --seq) at --embd {}, --vocab {}",
                                batch, seq, embd, vocab)
                        .c_str());
}

std::string GptConfig::describe() const {
  if (!llama()) return fmt::format("GPT-2 L={} H={} C={} V={} ctx={}", layers, heads, embd, vocab, ctx);
  return fmt::format("Llama L={} H={} KV={} D={} C={} F={} V={} ctx={} theta={}{}{}{}", layers, heads, kv(), hd(), embd,
                     mlp_width(), vocab, ctx, rope_theta,
                     rope_scaling.kind == cpu::RopeScaling::kLlama3 ? " rope llama3" : "", tied ? " tied" : " untied",
                     qkv_bias ? " qkv-bias" : "");
}

}  // namespace strata::gpt
