// Where each weight sits in the units of a model of either family (gpt_units): the slot indices of a block, of the
// embeddings, of the final norm and of an untied head, -1 where the family has no such weight (GPT-2's biases and
// wpe, for instance, are absent from a Llama-style model).
#pragma once

#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

struct BlockSlots {
  int ln1w = -1, ln1b = -1;  // the attention's norm (GPT-2: ln_1; Llama: attention_norm)
  int attnw = -1, attnb = -1;  // the fused q|k|v product [embd, q_width + 2 kv_width] and its bias
  int projw = -1, projb = -1;  // the attention's output product [q_width, embd]
  int ln2w = -1, ln2b = -1;  // the MLP's norm (ln_2; ffn_norm)
  int fcw = -1, fcb = -1;  // the MLP's up product: [embd, 4 embd] (c_fc), or gate|up [embd, 2 ffn] (w13)
  int fcprojw = -1, fcprojb = -1;  // its down product [4 embd or ffn, embd]
};
BlockSlots block_slots(const GptConfig& cfg);

// The embeddings unit: the token table (also the tied head) and GPT-2's position table.
struct EmbeddingSlots {
  int wte = 0, wpe = -1;
};
EmbeddingSlots embedding_slots(const GptConfig& cfg);

// The final norm's unit.
struct NormSlots {
  int w = 0, b = -1;
};
NormSlots final_norm_slots(const GptConfig& cfg);

}  // namespace strata::gpt
