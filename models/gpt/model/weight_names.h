// check_weight_names: strict loading by name, as PyTorch's load_state_dict(strict=True): a weight file's tensors
// must be exactly a model's parameters.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace strata::gpt {

// Throws kIo when `file` holds a tensor that is no parameter of the model (`expected`: its parameter names) or lacks
// one of them, listing both kinds at once, each sorted and cut at 20 names with the count of the rest. Names match
// with or without one leading "transformer." (the reader's lookup). Hugging Face's GPT-2 files carry buffers beside
// the parameters, which are not refused: a block's attention mask (h.{i}.attn.bias, h.{i}.attn.masked_bias, for a
// block the model has), and lm_head.weight when it equals wte.weight (GPT-2 ties them; a different one is refused).
// `what` names the file's role in the message ("--init").
void check_weight_names(const SafetensorsReader& file, const std::vector<std::string>& expected,
                        const std::string& what);

// "'a', 'b', 'c'" of the names, sorted, at most `cap` of them, then " and N more".
std::string name_list(std::vector<std::string> names, std::size_t cap = 20);

}  // namespace strata::gpt
