// GptTrainerState: what train_gpt keeps of its position in a checkpoint (the index's state.trainer: the next step, the
// data position, the seed, the data it read, the configuration for the record), and the one schema every reader of
// it goes through (a resume, strata-ckpt verify), so a damaged or foreign value is an error naming the index and the
// field, never a JSON library's bare message or a value used out of range.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt/data/token_data.h"
#include "models/gpt/model/gpt_model.h"
#include "runtime/checkpoint/checkpoint_index.h"

namespace strata::gpt {

// The data a run trained on: enough to tell, on a resume, whether the data position still means the same rows.
struct GptDataRecord {
  std::string source;  // the file (--data / --text), or "<synthetic>"
  std::uint64_t tokens = 0;
  std::string fingerprint;  // CRC-32 of the first 64 MiB of tokens and their count, "crc32:1234abcd"
  static GptDataRecord of(const TokenFile& data);
  bool same_tokens(const GptDataRecord& other) const {
    return tokens == other.tokens && fingerprint == other.fingerprint;
  }
  std::string describe() const;  // "data.bin (65536 tokens, crc32:1234abcd)"
};

struct GptTrainerState {
  std::int64_t next_step = 0;   // the step a resume runs first; a checkpoint is saved at this step
  std::uint64_t rows_done = 0;  // global rows consumed
  std::optional<std::uint64_t> seed;
  std::optional<int> world_size;
  std::optional<int> heads;           // the attention heads it trained with (they do not change the weights' shapes)
  std::string family = "gpt2";        // the model family (absent before the Llama-style family: gpt2)
  std::optional<int> seq;             // tokens per row (rows_done counts rows of this many)
  std::optional<GptDataRecord> data;  // absent in checkpoints written before Hardening 2, and in imports
  nlohmann::json config = nlohmann::json::object();  // TrainConfig::to_json(), for the record
  std::vector<std::string> resume_notes;             // what the resume that led here warned about, for the record

  nlohmann::json to_json() const;
  // Checks `j` (state.trainer of the index `origin`) against the schema: kIo "<origin>: .state.trainer.next_step:
  // expected an integer in [0, 2^31 - 1], got "5"". Unknown fields are returned in `unknown` (for a warning).
  static GptTrainerState parse(const nlohmann::json& j, const std::string& origin, std::vector<std::string>* unknown);
};

// The model a checkpoint holds (`index`, of the step directory `step_dir`): a Llama-style run's whole shape from its
// trainer record; a GPT-2's dimensions from its params tensors, with the heads of the record or else `heads` (an
// imported checkpoint records none; 0 and none is refused asking for --heads). A `heads` other than the record's is
// refused naming both; every parameter's shape is checked (model_record.h).
GptConfig checkpoint_model(const CheckpointIndex& index, const std::string& step_dir, int heads);

}  // namespace strata::gpt
