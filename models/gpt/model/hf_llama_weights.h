// HfLlamaWeights: a Llama-style model's parameters (gpt_units' layout: fused q | k | v and gate | up, every product
// [in, out]) read from a Hugging Face safetensors file (LlamaForCausalLM's names, nn.Linear's [out, in] layout).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

class HfLlamaWeights {
 public:
  // Checks the file against `cfg` first: exactly the model's tensors (strict, as check_weight_names; a prefix-less or
  // "model."-prefixed layout), each of the shape the config gives it. kIo / kMismatch name the file, the tensor and
  // both shapes.
  HfLlamaWeights(const SafetensorsReader& file, const GptConfig& cfg);

  // Elements [begin, begin + count) (row-major, global) of the model's parameter `name` (gpt_units' names). The
  // transposed and fused tensors are read whole once and kept (this is the init path of a small or medium model;
  // the sharded reading of large directories is the model-directory loader's).
  void read(const std::string& name, std::size_t begin, std::size_t count, float* out);

  // The file's tensor names this model reads, for messages.
  const std::vector<std::string>& names() const { return names_; }

 private:
  // A part of a fused parameter: columns [col, col + cols) of it are rows [0, cols) of the file's [cols, in] tensor.
  struct Part {
    std::string tensor;
    std::size_t col = 0, cols = 0;
  };
  const std::vector<float>& whole(const std::string& tensor);

  const SafetensorsReader& file_;
  GptConfig cfg_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> same_;         // parameter -> the file's tensor of the same layout
  std::map<std::string, std::vector<Part>> parts_;  // parameter -> its transposed parts, in column order
  std::map<std::string, std::vector<Part>> biases_;  // q | k | v biases, concatenated
  std::map<std::string, std::vector<float>> cache_;
};

// Whether a safetensors file holds Hugging Face Llama names (model.embed_tokens.weight).
bool has_hf_llama_names(const SafetensorsReader& file);

}  // namespace strata::gpt
