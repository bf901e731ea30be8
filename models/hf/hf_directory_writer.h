// write_hf_directory: a Hugging Face model directory as transformers' save_pretrained lays it out: config.json, and
// model.safetensors or, above the shard size, model-0000i-of-0000N.safetensors with model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata::hf {

// One tensor of the directory: its name, its shape, and a reader of its row-major elements [begin, begin + count)
// as f32 (called piece by piece, in order; written as the directory's dtype).
struct HfTensorOut {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<void(std::uint64_t begin, std::uint64_t count, float* out)> read;
};

struct HfWriteStats {
  int shards = 0;
  std::uint64_t bytes = 0;  // the tensors' bytes (the index's total_size)
};

// Writes `tensors`, in order, as `dtype` (kF32 or kBF16) in shards of at most `max_shard_bytes` of tensor data (a
// tensor larger than that gets a shard of its own, as in transformers), and `config` as config.json. Everything goes
// into DIR.tmp.<host>.<pid>.<n> first, each file flushed, and the directory is renamed to `dir` last: a failure
// leaves no directory that looks complete. `dir` must not exist (kIo naming it otherwise). `metadata` (strings) goes
// into each shard's __metadata__ with "format": "pt".
// `copy_in` files (a tokenizer's, beside the weights the run started from) are copied into the directory by their
// file names before the rename.
HfWriteStats write_hf_directory(const std::string& dir, const nlohmann::json& config,
                                const std::vector<HfTensorOut>& tensors, DType dtype, std::uint64_t max_shard_bytes,
                                nlohmann::json metadata = nlohmann::json::object(),
                                const std::vector<std::string>& copy_in = {});

// The tokenizer files of a Hugging Face model directory that `dir` holds (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, tokenizer.model, vocab.json, merges.txt, added_tokens.json, generation_config.json), as
// paths; none when `dir` is not a directory.
std::vector<std::string> tokenizer_files(const std::string& dir);

}  // namespace strata::hf
