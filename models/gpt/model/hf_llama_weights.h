// HfLlamaWeights: a Llama-style model's parameters (gpt_units' layout: fused q | k | v and gate | up, every product
// [in, out]) read from a Hugging Face safetensors file (LlamaForCausalLM's names, nn.Linear's [out, in] layout).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/gpt/model/gpt_model.h"
#include "runtime/tensor/global_elements.h"

namespace strata::gpt {

class HfLlamaWeights {
 public:
  // Checks the file against `cfg` first: exactly the model's tensors (strict, as check_weight_names; a prefix-less or
  // "model."-prefixed layout), each of the shape the config gives it. kIo / kMismatch name the file, the tensor and
  // both shapes.
  HfLlamaWeights(const SafetensorsReader& file, const GptConfig& cfg);

  // The runs of the model's parameter `name` (gpt_units' names, its global row-major elements) into out[run.local
  // ...], reading from the file those elements and no others: a transposed tensor's held rows of each column (one
  // contiguous stretch of the file, since a rank's shard is a contiguous range of its slice) in one read, staged
  // (at most the runs' elements) and scattered. Const, without a cache: any thread, any number at once.
  void read(const std::string& name, const std::vector<GlobalRun>& runs, float* out) const;
  // Elements [begin, begin + count) of parameter `name`.
  void read(const std::string& name, std::size_t begin, std::size_t count, float* out) const {
    read(name, {GlobalRun{0, begin, count}}, out);
  }

  // The file's tensor names this model reads, for messages.
  const std::vector<std::string>& names() const { return names_; }

 private:
  // A part of a fused parameter: columns [col, col + cols) of it are rows [0, cols) of the file's [cols, in] tensor.
  struct Part {
    std::string tensor;
    std::size_t col = 0, cols = 0;
  };
  void read_transposed(const std::vector<Part>& parts, const std::vector<GlobalRun>& runs, float* out) const;

  const SafetensorsReader& file_;
  GptConfig cfg_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> same_;         // parameter -> the file's tensor of the same layout
  std::map<std::string, std::vector<Part>> parts_;  // parameter -> its transposed parts, in column order
  std::map<std::string, std::vector<Part>> biases_;  // q | k | v biases, concatenated
};

// Whether a safetensors file holds Hugging Face Llama names (model.embed_tokens.weight).
bool has_hf_llama_names(const SafetensorsReader& file);

}  // namespace strata::gpt
