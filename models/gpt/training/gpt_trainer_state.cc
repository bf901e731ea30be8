// GptTrainerState: its JSON form and schema; the data record's fingerprint.
#include "models/gpt/training/gpt_trainer_state.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "core/error.h"
#include "core/json_schema.h"
#include "models/gpt/model/model_record.h"
#include "runtime/checkpoint/chunk_file.h"

namespace strata::gpt {
namespace {

constexpr std::uint64_t kFingerprintTokens = std::uint64_t{32} << 20;  // 64 MiB of tokens

const JsonSchema& state_schema() {
  using S = JsonSchema;
  // The configuration is a record (a resume takes its flags): only what a resume compares is checked.
  const S config =
      S::object({optional("model", S::object({optional("heads", S::integer(1, 1 << 20)),
                                              optional("family", S::string(16))},
                                             S::Unknown::kAllow)),
                 optional("seq", S::integer(1, INT32_MAX))},
                S::Unknown::kAllow);
  static const S s = S::object(
      {required("next_step", S::integer(0, INT32_MAX)), required("rows_done", S::integer(0, std::uint64_t{1} << 62)),
       optional("rng", S::object({required("seed", S::integer(0, UINT64_MAX))})),
       optional("world_size", S::integer(1, 1 << 24)), optional("config", config),
       optional("data", S::object({required("source", S::string(4096)),
                                   required("tokens", S::integer(0, std::uint64_t{1} << 62)),
                                   required("fingerprint", S::string(64))})),
       optional("resume_notes", S::array(S::string(), 64))},
      S::Unknown::kReport);
  return s;
}

}  // namespace

GptDataRecord GptDataRecord::of(const TokenFile& data) {
  // CRC-32 of the first tokens' bytes at the data's width (uint16 files: their bytes as stored), read in blocks.
  const std::uint64_t n = std::min<std::uint64_t>(data.size(), kFingerprintTokens);
  constexpr std::uint64_t kBlock = std::uint64_t{1} << 18;
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(std::min(n, kBlock)));
  std::vector<std::uint16_t> narrow(data.token_bytes() == 2 ? tokens.size() : 0);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (std::uint64_t at = 0; at < n;) {
    const std::uint64_t k = std::min(kBlock, n - at);
    data.read(at, k, tokens.data());
    if (data.token_bytes() == 2) {
      for (std::uint64_t i = 0; i < k; ++i) narrow[i] = static_cast<std::uint16_t>(tokens[i]);
      crc = ::crc32(crc, reinterpret_cast<const Bytef*>(narrow.data()), static_cast<uInt>(k * 2));
    } else {
      crc = ::crc32(crc, reinterpret_cast<const Bytef*>(tokens.data()), static_cast<uInt>(k * 4));
    }
    at += k;
  }
  return GptDataRecord{data.path(), data.size(), fmt::format("crc32:{:08x}", crc)};
}

std::string GptDataRecord::describe() const { return fmt::format("{} ({} tokens, {})", source, tokens, fingerprint); }

nlohmann::json GptTrainerState::to_json() const {
  nlohmann::json j = {{"next_step", next_step}, {"rows_done", rows_done}};
  if (seed) j["rng"] = {{"seed", *seed}};
  if (world_size) j["world_size"] = *world_size;
  if (!config.empty()) j["config"] = config;
  if (data) j["data"] = {{"source", data->source}, {"tokens", data->tokens}, {"fingerprint", data->fingerprint}};
  if (!resume_notes.empty()) j["resume_notes"] = resume_notes;
  return j;
}

GptTrainerState GptTrainerState::parse(const nlohmann::json& j, const std::string& origin,
                                       std::vector<std::string>* unknown) {
  const std::vector<std::string> extra = state_schema().check(j, origin, ErrorCode::kIo, ".state.trainer");
  if (unknown) *unknown = extra;
  GptTrainerState s;
  s.next_step = j["next_step"].get<std::int64_t>();
  s.rows_done = j["rows_done"].get<std::uint64_t>();
  if (j.contains("rng")) s.seed = j["rng"]["seed"].get<std::uint64_t>();
  if (j.contains("world_size")) s.world_size = j["world_size"].get<int>();
  if (j.contains("config")) {
    s.config = j["config"];
    if (s.config.contains("model") && s.config["model"].contains("heads"))
      s.heads = s.config["model"]["heads"].get<int>();
    if (s.config.contains("model") && s.config["model"].contains("family"))
      s.family = s.config["model"]["family"].get<std::string>();
    if (s.config.contains("seq")) s.seq = s.config["seq"].get<int>();
  }
  if (j.contains("data")) s.data = GptDataRecord{j["data"]["source"], j["data"]["tokens"], j["data"]["fingerprint"]};
  if (j.contains("resume_notes")) s.resume_notes = j["resume_notes"].get<std::vector<std::string>>();
  return s;
}

GptConfig checkpoint_model(const CheckpointIndex& index, const std::string& step_dir, int heads) {
  const ShapeOf shape = [&](const std::string& name) -> const std::vector<std::int64_t>* {
    const std::string t = params_tensor(name);
    return index.has_tensor(t) ? &index.tensor(t).shape : nullptr;
  };
  if (index.state.contains("trainer")) {
    const GptTrainerState s = GptTrainerState::parse(index.state["trainer"], step_dir, nullptr);
    STRATA_CHECK(heads == 0 || !s.heads || heads == *s.heads,
                 "--heads {}: the checkpoint {} was trained with {} heads (its record); drop --heads or give {}", heads,
                 step_dir, *s.heads, *s.heads);
    if (s.heads) heads = *s.heads;
    if (parse_family(s.family) == Family::kLlama) {
      STRATA_CHECK_CODE(ErrorCode::kIo, s.config.contains("model"),
                        "{}: a Llama-style run's record has no config.model", step_dir);
      const GptConfig cfg = llama_config_from_record(s.config["model"], step_dir);
      check_shapes(cfg, shape, step_dir);
      return cfg;
    }
  }
  return config_from_shapes(shape, heads, step_dir);
}

}  // namespace strata::gpt
