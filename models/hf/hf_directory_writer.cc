// write_hf_directory: shards by size, each written through SafetensorsWriter's header and AtomicFile, then the index,
// config.json, and the rename of the whole directory.
#include "models/hf/hf_directory_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/safetensors.h"
#include "core/shape_string.h"
#include "runtime/checkpoint/chunk_file.h"
#include "runtime/sharding/shard_layout.h"  // shape_numel

namespace strata::hf {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kPieceElements = std::uint64_t{1} << 20;  // converted and written a piece at a time

}  // namespace

HfWriteStats write_hf_directory(const std::string& dir, const nlohmann::json& config,
                                const std::vector<HfTensorOut>& tensors, DType dtype, std::uint64_t max_shard_bytes,
                                nlohmann::json metadata, const std::vector<std::string>& copy_in) {
  STRATA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "a model directory is written as F32 or BF16");
  STRATA_CHECK(max_shard_bytes > 0, "the shard size must be more than 0 bytes");
  std::error_code ec;
  STRATA_CHECK_CODE(ErrorCode::kIo, !fs::exists(dir, ec), "{} exists already: a model directory is written to a new "
                    "path (nothing there is replaced)", dir);
  const fs::path parent = fs::absolute(dir).parent_path();
  STRATA_CHECK_CODE(ErrorCode::kIo, fs::is_directory(parent, ec), "cannot write {}: {} is not a directory", dir,
                    parent.string());
  const std::size_t esize = dtype_size(dtype);
  // Shards: consecutive tensors while they fit (an oversized tensor alone), as save_pretrained splits them.
  std::vector<std::vector<std::size_t>> shards;
  std::uint64_t in_shard = 0, total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::uint64_t bytes = shape_numel(tensors[i].shape) * esize;
    if (shards.empty() || (in_shard > 0 && in_shard + bytes > max_shard_bytes)) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
    total += bytes;
  }
  const int n = static_cast<int>(shards.size());
  auto shard_name = [&](int s) {
    return n == 1 ? std::string("model.safetensors") : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n);
  };

  const std::string tmp = unique_tmp_path(dir);
  fs::create_directory(tmp, ec);
  STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "cannot create {}: {}", tmp, ec.message());
  try {
    metadata["format"] = "pt";
    nlohmann::json weight_map = nlohmann::json::object();
    std::vector<float> values;
    std::vector<std::uint16_t> halves;
    for (int s = 0; s < n; ++s) {
      SafetensorsWriter writer;
      for (std::size_t i : shards[static_cast<std::size_t>(s)]) {
        writer.declare(tensors[i].name, dtype, tensors[i].shape);
        weight_map[tensors[i].name] = shard_name(s);
      }
      const std::string head = writer.header(metadata, nullptr);
      AtomicFile file(tmp + "/" + shard_name(s));
      file.write(head.data(), head.size());
      for (std::size_t i : shards[static_cast<std::size_t>(s)]) {
        const std::uint64_t count = shape_numel(tensors[i].shape);
        for (std::uint64_t at = 0; at < count; at += kPieceElements) {
          const std::uint64_t m = std::min(kPieceElements, count - at);
          values.resize(m);
          tensors[i].read(at, m, values.data());
          if (dtype == DType::kF32) {
            file.write(values.data(), m * 4);
          } else {
            halves.resize(m);
            for (std::uint64_t k = 0; k < m; ++k) halves[k] = f32_to_bf16(values[k]);
            file.write(halves.data(), m * 2);
          }
        }
      }
      file.commit();
    }
    if (n > 1)
      write_file_atomically(tmp + "/model.safetensors.index.json",
                            nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) +
                                "\n");
    write_file_atomically(tmp + "/config.json", config.dump(2) + "\n");
    for (const std::string& from : copy_in) {
      const std::string to = tmp + "/" + fs::path(from).filename().string();
      fs::copy_file(from, to, ec);
      STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "cannot copy {} to {}: {}", from, to, ec.message());
    }
    fsync_directory(tmp);
    fs::rename(tmp, dir, ec);
    STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "cannot rename {} to {}: {}", tmp, dir, ec.message());
    fsync_directory(parent.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return HfWriteStats{n, total};
}

std::vector<std::string> tokenizer_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                           "vocab.json", "merges.txt", "added_tokens.json", "generation_config.json"})
    if (fs::is_regular_file(fs::path(dir) / name, ec)) out.push_back((fs::path(dir) / name).string());
  return out;
}

}  // namespace strata::hf
