// strata-ckpt: lists, verifies, exports, imports and assembles the sharded checkpoints of runtime/checkpoint (docs/checkpoint.md).
// A plain program, not an MPI job: it reads and writes files only, through runtime/checkpoint's own readers and
// writers, and never initialises MPI (as strata-plan).
#include <fmt/ranges.h>
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "core/atomic_file.h"
#include "core/dir_lock.h"
#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/safetensors.h"
#include "core/tool_main.h"
#include "models/gpt/model/gpt_model.h"
#include "models/gpt/model/hf_export.h"
#include "models/gpt/model/weight_names.h"
#include "models/gpt/training/gpt_trainer_state.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/checkpoint_index.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/checkpoint_values.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/checkpoint/chunk_file.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Export and import move a tensor in pieces of this many checkpoint blocks: memory stays bounded, and a piece is a
// whole number of blocks (import relies on it).
constexpr std::uint64_t kPieceBlocks = 16;

std::string message_of(const std::exception& e) { return tool_message(e); }

// A field of an index's layout as a table cell: "-" when absent (an imported checkpoint has no layout).
std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void require_directory(const std::string& dir) {
  std::error_code ec;
  STRATA_CHECK_CODE(ErrorCode::kIo, fs::is_directory(dir, ec), "{} is not a directory", dir);
}

// The step a command works on: --step, or the one --resume would load.
std::int64_t chosen_step(const CheckpointDir& dir, std::int64_t step) {
  require_directory(dir.path());
  if (step >= 0) {
    std::error_code ec;
    STRATA_CHECK_CODE(ErrorCode::kIo, fs::is_directory(dir.step_path(step), ec), "{} has no {}", dir.path(),
                      CheckpointDir::step_name(step));
    return step;
  }
  step = dir.latest_step();
  STRATA_CHECK_CODE(ErrorCode::kIo, step >= 0, "no committed checkpoint in {}", dir.path());
  return step;
}

// ---- ls -----------------------------------------------------------------------------------------------------------

int run_ls(const std::string& path, bool json) {
  const CheckpointDir dir(path);
  require_directory(path);
  const std::vector<std::int64_t> steps = dir.committed_steps();
  const std::int64_t latest = dir.latest_step();
  nlohmann::json rows = nlohmann::json::array();
  for (std::int64_t step : steps) {
    nlohmann::json row = {{"name", CheckpointDir::step_name(step)}, {"step", step}, {"latest", step == latest}};
    try {
      const CheckpointIndex index = dir.read_index(step);
      std::uint64_t bytes = 0;
      for (const FileRecord& f : index.files) bytes += f.bytes;
      row["world_size"] = index.world_size;
      row["zero_stage"] = index.layout.value("zero_stage", nlohmann::json());
      // The tensor-parallel degree it was saved at (a layout from before tp records none: 1).
      const nlohmann::json mesh = index.layout.value("mesh", nlohmann::json());
      row["tp"] = mesh.is_object() ? mesh.value("tp", nlohmann::json(1)) : nlohmann::json();
      row["param_dtype"] = index.layout.value("param_dtype", nlohmann::json());
      row["files"] = index.files.size();
      row["bytes"] = bytes;
      row["tensors"] = index.tensors.size();
      row["version"] = index.version;
    } catch (const std::exception& e) {
      row["error"] = message_of(e);
    }
    rows.push_back(row);
  }
  // What is in the directory but not loadable: a save in progress or killed (.tmp), or a step directory without its
  // marker (a removal stopped half-way).
  nlohmann::json incomplete = nlohmann::json::array();
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::int64_t tmp_step = CheckpointDir::parse_step_name(name, true);
    const std::int64_t step = CheckpointDir::parse_step_name(name, false);
    if (tmp_step >= 0)
      incomplete.push_back({{"name", name}, {"step", tmp_step}, {"reason", "a save in progress or interrupted"}});
    else if (step >= 0 && !std::binary_search(steps.begin(), steps.end(), step))
      incomplete.push_back({{"name", name}, {"step", step}, {"reason", "no COMMITTED marker or no index.json"}});
  }
  std::string latest_file;
  if (fs::exists(path + "/latest", ec)) {
    latest_file = read_text_file(path + "/latest");
    while (!latest_file.empty() && (latest_file.back() == '\n' || latest_file.back() == ' ')) latest_file.pop_back();
  }

  if (json) {
    nlohmann::json out = {{"dir", path},
                          {"latest", latest >= 0 ? nlohmann::json(CheckpointDir::step_name(latest)) : nlohmann::json()},
                          {"latest_file", latest_file},
                          {"checkpoints", rows},
                          {"incomplete", incomplete}};
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf(
      "# %s: %zu committed checkpoint(s)%s\n", path.c_str(), steps.size(),
      latest >= 0 ? fmt::format(", latest {} (what --resume loads)", CheckpointDir::step_name(latest)).c_str() : "");
  std::printf("%-18s %6s %5s %3s %4s %5s %5s %14s %7s\n", "# checkpoint", "latest", "world", "tp", "zero", "dtype",
              "files", "bytes", "tensors");
  for (const nlohmann::json& row : rows) {
    const std::string name = row["name"];
    const char* mark = row["latest"].get<bool>() ? "*" : "";
    if (row.contains("error")) {
      std::printf("%-18s %6s  unreadable index: %s\n", name.c_str(), mark, row["error"].get<std::string>().c_str());
      continue;
    }
    std::printf("%-18s %6s %5d %3s %4s %5s %5zu %14llu %7zu\n", name.c_str(), mark, row["world_size"].get<int>(),
                cell(row["tp"]).c_str(), cell(row["zero_stage"]).c_str(), cell(row["param_dtype"]).c_str(),
                row["files"].get<std::size_t>(), static_cast<unsigned long long>(row["bytes"].get<std::uint64_t>()),
                row["tensors"].get<std::size_t>());
  }
  for (const nlohmann::json& row : incomplete)
    std::printf("%-18s incomplete (not loadable): %s\n", row["name"].get<std::string>().c_str(),
                row["reason"].get<std::string>().c_str());
  if (!latest_file.empty() && (latest < 0 || latest_file != CheckpointDir::step_name(latest)))
    std::printf("# note: %s/latest names '%s', which is not committed; --resume loads the newest committed one\n",
                path.c_str(), latest_file.c_str());
  return 0;
}

// ---- verify -------------------------------------------------------------------------------------------------------

// Everything the loader relies on, beyond what parse() checks: each slot of the declaration has its params tensor
// with the slot's shape; trainable slots have every per-element tensor of the optimizer's state (AdamW's moments, a
// momentum buffer) or (an imported checkpoint) none at all; no other tensor.
void check_declaration(const CheckpointIndex& index, std::vector<std::string>& problems) {
  const nlohmann::json opt = index.state.value("optimizer", nlohmann::json::object());
  const std::vector<std::string> state_names = saved_optimizer_tensors(opt);
  std::set<std::string> expected;
  int with_state = 0, without_state = 0;
  for (const UnitSpec& u : index.units)
    for (const SlotSpec& s : u.slots) {
      std::vector<std::string> names = {params_tensor(s.name)};
      if (s.trainable)
        for (const std::string& t : state_names) names.push_back(optimizer_tensor(t, s.name));
      bool all = true;  // of the optimizer's tensors
      for (std::size_t k = 0; k < names.size(); ++k) {
        expected.insert(names[k]);
        if (!index.has_tensor(names[k])) {
          if (k == 0) {
            problems.push_back(fmt::format("slot '{}' has no tensor '{}'", s.name, names[k]));
          } else {
            all = false;
          }
          continue;
        }
        const TensorRecord& t = index.tensor(names[k]);
        if (t.shape != s.shape)
          problems.push_back(fmt::format("tensor '{}' has shape {}, its slot {}", names[k], shape_string(t.shape),
                                         shape_string(s.shape)));
      }
      if (s.trainable && !state_names.empty()) (all ? with_state : without_state)++;
    }
  const std::string kind = saved_optimizer_kind(opt).empty() ? "optimizer" : saved_optimizer_kind(opt);
  if (with_state > 0 && without_state > 0)
    problems.push_back(fmt::format("{} trainable slots have the {} state ({}) and {} do not", with_state, kind,
                                   fmt::join(state_names, ", "), without_state));
  const std::int64_t opt_step = opt.value("step", -1);
  if (without_state > 0 && opt_step > 0)
    problems.push_back(fmt::format("the {} is at step {} but its state ({}) is missing", kind, opt_step,
                                   fmt::join(state_names, ", ")));
  for (const auto& [name, t] : index.tensors)
    if (!expected.count(name)) problems.push_back(fmt::format("tensor '{}' belongs to no slot of the model", name));
}

// Every block of chunk `c` read (its checksum checked) and every value in range (runtime/checkpoint/
// checkpoint_values.h): the first value out of range is a problem naming the tensor and the element.
void verify_chunk(const ChunkReader& reader, std::uint64_t block_bytes, const TensorRecord& t, const ChunkRecord& c,
                  std::vector<char>& staging, std::vector<std::string>& problems) {
  const std::size_t esz = dtype_size(t.dtype);
  const std::uint64_t per_block = block_bytes / esz;
  std::vector<char> raw(per_block * esz);
  std::vector<float> values(per_block);
  for (std::uint64_t at = 0; at < c.count; at += per_block) {
    const std::uint64_t n = std::min(per_block, c.count - at);
    reader.read(c, t.name, esz, c.begin + at, n, raw.data(), staging.data());
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint16_t h = 0;
      if (esz == 2) std::memcpy(&h, raw.data() + 2 * i, 2);
      values[i] = t.dtype == DType::kF32    ? reinterpret_cast<const float*>(raw.data())[i]
                  : t.dtype == DType::kBF16 ? bf16_to_f32(h)
                                            : f16_to_f32(h);
    }
    const std::size_t bad = first_bad_value(t.name, values.data(), n);
    if (bad < n) {
      const std::string box = c.whole_box(t.shape) ? std::string()
                                                   : fmt::format(" of the box at {} of shape {}",
                                                                 shape_string(c.box_offset), shape_string(c.box_shape));
      problems.push_back(describe_bad_value(t.name, c.begin + at + bad, values[bad]) + box + ", with valid checksums");
      return;
    }
  }
}

// The trainer state train_gpt and strata-ckpt import write (models/gpt/training/gpt_trainer_state.h), when present.
// Another trainer's (an embedder's, which names itself in "program", as examples/custom_trainer does) is its own: only
// its next_step, when it has one, is held to the checkpoint's step.
void check_trainer_state(const CheckpointIndex& index, const std::string& where, std::vector<std::string>& problems,
                         std::vector<std::string>& notes) {
  if (!index.state.contains("trainer")) return;
  const nlohmann::json& trainer = index.state["trainer"];
  if (trainer.contains("program")) {
    notes.push_back(fmt::format("{}: the trainer state is {}'s own; its fields are not checked here", where,
                                trainer["program"].dump()));
    if (trainer.contains("next_step") && trainer["next_step"] != index.step)
      problems.push_back(fmt::format("checkpoint index {}: .state.trainer.next_step is {}, the checkpoint's step {}",
                                     where, trainer["next_step"].dump(), index.step));
    return;
  }
  try {
    std::vector<std::string> unknown;
    const gpt::GptTrainerState s = gpt::GptTrainerState::parse(index.state["trainer"], "checkpoint index " + where,
                                                               &unknown);
    if (s.next_step != index.step)
      problems.push_back(fmt::format("checkpoint index {}: .state.trainer.next_step is {}, the checkpoint's step {}",
                                     where, s.next_step, index.step));
    for (const std::string& f : unknown)
      notes.push_back(fmt::format("{}: field {} is not one this Strata knows", where, f));
  } catch (const Error& e) {
    problems.push_back(message_of(e));
  }
}

int run_verify(const std::string& path, std::int64_t step_flag, bool json) {
  const CheckpointDir dir(path);
  const std::int64_t step = chosen_step(dir, step_flag);
  const std::string name = CheckpointDir::step_name(step);
  const std::string step_dir = dir.step_path(step);
  std::vector<std::string> problems, notes;
  std::uint64_t chunks = 0, bytes = 0;
  std::size_t tensors = 0;
  nlohmann::json file_rows = nlohmann::json::array();
  try {
    const CheckpointIndex index = dir.read_index(step);  // every check of parse(), the index's checksum included
    tensors = index.tensors.size();
    if (!index.checksummed)
      notes.push_back(fmt::format("{}/index.json carries no checksum of its own (written by a Strata from before "
                                  "index checksums): its fields were checked for type and range only",
                                  step_dir));
    for (const std::string& f : index.unknown_fields)
      notes.push_back(fmt::format("{}/index.json: field {} is not one this Strata knows", step_dir, f));
    // `latest` names what a resume loads: a name that is not this committed step (it was removed, or never
    // committed) is damage to the directory, even though a resume would pass over it to the newest committed one.
    const std::string latest = dir.latest_name();
    if (step_flag < 0 && !latest.empty() && CheckpointDir::parse_step_name(latest, false) != step)
      problems.push_back(
          fmt::format("{}/latest names '{}', which is not a committed checkpoint here; the newest "
                      "committed one is {} (a resume loads it and trains the steps after it again)",
                      dir.path(), latest, name));
    check_trainer_state(index, step_dir + "/index.json", problems, notes);
    const std::string coverage = index.coverage_problem();
    if (!coverage.empty()) problems.push_back(coverage);
    check_declaration(index, problems);
    // Each file: its size as the index says, then every block of every chunk in it, in file order.
    std::vector<std::vector<std::pair<const TensorRecord*, const ChunkRecord*>>> by_file(index.files.size());
    for (const auto& [tname, t] : index.tensors)
      for (const ChunkRecord& c : t.chunks) by_file[static_cast<std::size_t>(c.file)].push_back({&t, &c});
    std::vector<char> staging(index.block_bytes);
    for (std::size_t f = 0; f < index.files.size(); ++f) {
      const FileRecord& fr = index.files[f];
      const std::string file_path = step_dir + "/" + fr.name;
      std::sort(by_file[f].begin(), by_file[f].end(),
                [](const auto& a, const auto& b) { return a.second->offset < b.second->offset; });
      const std::size_t before = problems.size();
      std::error_code ec;
      const std::uintmax_t size = fs::file_size(file_path, ec);
      if (ec) {
        problems.push_back(fmt::format("checkpoint file {} cannot be read: {}", file_path, ec.message()));
      } else if (size != fr.bytes) {
        problems.push_back(fmt::format("checkpoint file {} has {} bytes, the index says {}{}", file_path, size,
                                       fr.bytes, size < fr.bytes ? ": it is truncated" : ""));
      }
      std::uint64_t file_chunks = 0;
      if (!ec && size >= fr.bytes) {
        try {
          const ChunkReader reader(file_path, fr.bytes, index.block_bytes);
          for (const auto& [t, c] : by_file[f]) {
            try {
              verify_chunk(reader, index.block_bytes, *t, *c, staging, problems);
            } catch (const Error& e) {
              problems.push_back(message_of(e));
            }
            ++file_chunks;
            bytes += c->count * dtype_size(t->dtype);
          }
        } catch (const Error& e) {
          problems.push_back(message_of(e));
        }
      }
      chunks += file_chunks;
      file_rows.push_back(
          {{"file", fr.name}, {"bytes", fr.bytes}, {"chunks", file_chunks}, {"ok", problems.size() == before}});
    }
  } catch (const Error& e) {
    problems.push_back(message_of(e));
  }
  const bool ok = problems.empty();
  if (json) {
    std::printf("%s\n", nlohmann::json{{"dir", path},
                                       {"checkpoint", name},
                                       {"step", step},
                                       {"ok", ok},
                                       {"tensors", tensors},
                                       {"chunks", chunks},
                                       {"bytes", bytes},
                                       {"files", file_rows},
                                       {"problems", problems},
                                       {"notes", notes}}
                            .dump(1)
                            .c_str());
    return ok ? 0 : 1;
  }
  std::printf("# %s\n", step_dir.c_str());
  std::printf("%-18s %14s %7s  %s\n", "# file", "bytes", "chunks", "verdict");
  for (const nlohmann::json& r : file_rows)
    std::printf("%-18s %14llu %7llu  %s\n", r["file"].get<std::string>().c_str(),
                static_cast<unsigned long long>(r["bytes"].get<std::uint64_t>()),
                static_cast<unsigned long long>(r["chunks"].get<std::uint64_t>()), r["ok"].get<bool>() ? "ok" : "BAD");
  const std::size_t shown = std::min<std::size_t>(problems.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) std::printf("problem: %s\n", problems[i].c_str());
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  if (shown < problems.size()) std::printf("problem: ... and %zu more\n", problems.size() - shown);
  if (ok)
    std::printf("verify: %s OK: %zu tensors, %llu chunks, %llu bytes checked (checksums and values)\n", name.c_str(),
                tensors, static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(bytes));
  else
    std::printf("verify: %s FAILED: %zu problem(s); %zu tensors, %llu chunks, %llu bytes checked\n", name.c_str(),
                problems.size(), tensors, static_cast<unsigned long long>(chunks),
                static_cast<unsigned long long>(bytes));
  return ok ? 0 : 1;
}

// ---- export -------------------------------------------------------------------------------------------------------

// Elements [begin, begin + count) of `t` through `reader`, each value checked: one that is not finite is kNonFinite
// naming the tensor and the element, and nothing is exported.
void read_exportable(CheckpointReader& reader, const TensorRecord& t, std::uint64_t begin, std::uint64_t count,
                     float* out, const std::string& step_dir) {
  reader.read_f32(t, begin, count, out);
  const std::size_t bad = first_bad_value(t.name, out, count);
  STRATA_CHECK_CODE(ErrorCode::kNonFinite, bad == count,
                    "{}: {}, with valid checksums: not exported (weights that are not finite train to nothing)",
                    step_dir, describe_bad_value(t.name, begin + bad, out[bad]));
}

int run_export(const std::string& path, const std::string& out, std::int64_t step_flag, const std::string& dtype_flag) {
  check_output_file(out, "OUT", OutputKind::kReplaced);  // before any checkpoint is read
  const CheckpointDir dir(path);
  const std::int64_t step = chosen_step(dir, step_flag);
  const CheckpointIndex index = dir.read_index(step);
  const DType dtype = dtype_flag == "bf16" ? DType::kBF16 : DType::kF32;
  // The params tensor of every slot, in the declaration's order, under the slot's name.
  std::vector<const TensorRecord*> tensors;
  std::vector<std::string> slots;
  SafetensorsWriter writer;
  for (const UnitSpec& u : index.units)
    for (const SlotSpec& s : u.slots) {
      const TensorRecord& t = index.tensor(params_tensor(s.name));
      STRATA_CHECK_CODE(ErrorCode::kIo, t.shape == s.shape, "{}: tensor '{}' has shape {}, its slot {}",
                        dir.step_path(step), t.name, shape_string(t.shape), shape_string(s.shape));
      tensors.push_back(&t);
      slots.push_back(s.name);
      writer.declare(s.name, dtype, s.shape);
    }
  const nlohmann::json metadata = {
      {"format", "pt"}, {"written_by", "strata-ckpt export"}, {"step", std::to_string(step)}};
  const std::string head = writer.header(metadata, nullptr);
  // One piece of one tensor in memory at a time: values read through the checkpoint's staging block (from whatever
  // boxes hold them: a tensor-parallel checkpoint's slices are put together here), converted, appended to OUT.tmp,
  // which is renamed over OUT once flushed.
  AtomicFile file(out);
  file.write(head.data(), head.size());
  std::vector<char> staging(index.block_bytes);
  CheckpointReader reader(dir.step_path(step), index, staging.data());
  const std::uint64_t piece = kPieceBlocks * index.block_bytes / 4;
  std::vector<float> values(piece);
  std::vector<std::uint16_t> halves(dtype == DType::kBF16 ? piece : 0);
  std::uint64_t elements = 0;
  for (const TensorRecord* t : tensors) {
    const std::uint64_t n = t->numel();
    for (std::uint64_t at = 0; at < n; at += piece) {
      const std::uint64_t count = std::min(piece, n - at);
      read_exportable(reader, *t, at, count, values.data(), dir.step_path(step));
      if (dtype == DType::kF32) {
        file.write(values.data(), count * 4);
      } else {
        for (std::uint64_t i = 0; i < count; ++i) halves[i] = f32_to_bf16(values[i]);
        file.write(halves.data(), count * 2);
      }
    }
    elements += n;
  }
  file.commit();
  const fs::path parent = fs::absolute(out).parent_path();
  fsync_directory(parent.string());
  std::printf("export: %s -> %s: %zu tensors, %llu elements as %s, %llu bytes\n", dir.step_path(step).c_str(),
              out.c_str(), tensors.size(), static_cast<unsigned long long>(elements),
              safetensors_dtype_name(dtype),
              static_cast<unsigned long long>(head.size() + elements * dtype_size(dtype)));
  return 0;
}

// ---- export --hf ---------------------------------------------------------------------------------------------------

int run_export_hf(const std::string& path, const std::string& out, std::int64_t step_flag,
                  const std::string& dtype_flag, int heads, const std::string& shard_size) {
  const std::uint64_t max_shard = parse_bytes(shard_size, "--max-shard-size");
  STRATA_CHECK(max_shard > 0, "--max-shard-size {} must be more than 0 bytes", shard_size);
  std::error_code ec;
  STRATA_CHECK_CODE(ErrorCode::kIo, !fs::exists(out, ec), "OUT {} exists already: --hf writes a new directory", out);
  const CheckpointDir dir(path);
  const std::int64_t step = chosen_step(dir, step_flag);
  const std::string step_dir = dir.step_path(step);
  const CheckpointIndex index = dir.read_index(step);
  const gpt::GptConfig cfg = gpt::checkpoint_model(index, step_dir, heads);
  const DType dtype = dtype_flag == "bf16" ? DType::kBF16 : DType::kF32;
  std::vector<char> staging(index.block_bytes);
  CheckpointReader reader(step_dir, index, staging.data());
  // Every value is checked as it is read: weights that are not finite are not exported (nothing is renamed).
  const std::uint64_t piece = kPieceBlocks * index.block_bytes / 4;
  const gpt::ParamReader param = [&](const std::string& name, std::uint64_t begin, std::uint64_t count, float* o) {
    const TensorRecord& t = index.tensor(params_tensor(name));
    for (std::uint64_t at = 0; at < count; at += piece)
      read_exportable(reader, t, begin + at, std::min(piece, count - at), o + at, step_dir);
  };
  const hf::HfWriteStats stats = hf::write_hf_directory(out, gpt::hf_config_json(cfg, dtype), gpt::hf_tensors(cfg, param),
                                                        dtype, max_shard,
                                                        {{"written_by", "strata-ckpt export --hf"},
                                                         {"step", std::to_string(step)}});
  std::printf("export: %s -> %s: %s, %d shard(s), %llu bytes of %s tensors, config.json\n", step_dir.c_str(),
              out.c_str(), cfg.describe().c_str(), stats.shards, static_cast<unsigned long long>(stats.bytes),
              safetensors_dtype_name(dtype));
  return 0;
}

// ---- import -------------------------------------------------------------------------------------------------------

// "GPT-2 L=12 C=768 V=50257 ctx=1024": what a weight file determines (heads are train_gpt's --heads).
std::string dims(const gpt::GptConfig& c) {
  return fmt::format("GPT-2 L={} C={} V={} ctx={}", c.layers, c.embd, c.vocab, c.ctx);
}

// The GPT-2 a weight file holds (docs/gpt-model.md's names, with or without "transformer."): layers from the h.{i}
// prefixes, embd and vocab from wte.weight, ctx from wpe.weight. Heads do not change the declaration (1 here).
// Refuses anything else, naming what is wrong; `ignored` receives the buffers Hugging Face files carry beside the
// parameters (the attention masks h.{i}.attn.bias / .masked_bias, and an lm_head.weight equal to wte.weight).
gpt::GptConfig infer_gpt(const SafetensorsReader& in, std::vector<std::string>& ignored) {
  const std::string& file = in.path();
  const std::string prefix = "transformer.";
  std::map<std::string, std::string> bare;  // name without the prefix -> as stored
  for (const std::string& name : in.names()) {
    const std::string b = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
    STRATA_CHECK_CODE(ErrorCode::kIo, bare.emplace(b, name).second, "{} holds '{}' twice (with and without '{}')", file,
                      b, prefix);
  }
  auto two_d = [&](const char* name) {
    STRATA_CHECK_CODE(ErrorCode::kIo, bare.count(name),
                      "{} is not a GPT-2 weight file of docs/gpt-model.md's names: "
                      "it has no '{}'",
                      file, name);
    const TensorInfo& t = in.info(name);
    STRATA_CHECK_CODE(ErrorCode::kIo, t.shape.size() == 2, "{}: '{}' has shape {}, a GPT-2's is 2-D", file, name,
                      shape_string(t.shape));
    return t.shape;
  };
  const std::vector<std::int64_t> wte = two_d("wte.weight"), wpe = two_d("wpe.weight");
  STRATA_CHECK_CODE(ErrorCode::kIo, wte[1] == wpe[1], "{}: wte.weight {} and wpe.weight {} differ in width", file,
                    shape_string(wte), shape_string(wpe));
  std::set<long long> blocks;
  for (const auto& [b, stored] : bare) {
    if (b.rfind("h.", 0) != 0) continue;
    const std::size_t dot = b.find('.', 2);
    const std::string digits = b.substr(2, dot == std::string::npos ? std::string::npos : dot - 2);
    STRATA_CHECK_CODE(ErrorCode::kIo,
                      !digits.empty() && digits.size() <= 6 &&
                          std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }),
                      "{}: '{}' is not a tensor of a GPT-2 block h.{{i}}", file, stored);
    blocks.insert(std::stoll(digits));
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, !blocks.empty(), "{} has no blocks h.{{i}}: not a GPT-2", file);
  const long long count = static_cast<long long>(blocks.size());
  STRATA_CHECK_CODE(ErrorCode::kIo, *blocks.begin() == 0 && *blocks.rbegin() + 1 == count,
                    "{} has blocks numbered {}..{} but only {} of them: not a GPT-2", file, *blocks.begin(),
                    *blocks.rbegin(), blocks.size());
  gpt::GptConfig cfg;
  cfg.layers = static_cast<int>(blocks.size());
  cfg.heads = 1;
  STRATA_CHECK_CODE(ErrorCode::kIo, wte[0] <= 65536 && wte[1] <= (1 << 20) && wpe[0] <= (1 << 24),
                    "{}: wte.weight {} / wpe.weight {} are outside what train_gpt takes (vocab <= 65536)", file,
                    shape_string(wte), shape_string(wpe));
  cfg.embd = static_cast<int>(wte[1]);
  cfg.vocab = static_cast<int>(wte[0]);
  cfg.ctx = static_cast<int>(wpe[0]);
  cfg.validate();
  // Strict, as train_gpt --init: every parameter present, nothing else but the buffers above; all listed at once.
  std::set<std::string> declared;
  std::vector<std::string> missing, unknown;
  for (const UnitSpec& u : gpt::gpt_units(cfg))
    for (const SlotSpec& s : u.slots) {
      declared.insert(s.name);
      if (bare.count(s.name)) in.check_shape(s.name, s.shape);
      else missing.push_back(s.name);
    }
  for (const auto& [b, stored] : bare) {
    if (declared.count(b)) continue;
    // "h.{i}.attn.bias" / "h.{i}.attn.masked_bias": a block's causal mask, a buffer rather than a parameter.
    const bool mask = b.rfind("h.", 0) == 0 && b.find(".attn.") == b.find('.', 2) &&
                      (b.ends_with(".attn.bias") || b.ends_with(".attn.masked_bias"));
    if (mask) {
      ignored.push_back(stored);
      continue;
    }
    if (b == "lm_head.weight") {
      // Tied to wte.weight in a GPT-2: take it only when it is the same matrix.
      in.check_shape(stored, wte);
      std::vector<float> a(1 << 16), w(1 << 16);
      const std::uint64_t n = in.info(stored).numel();
      for (std::uint64_t at = 0; at < n; at += a.size()) {
        const std::size_t c = static_cast<std::size_t>(std::min<std::uint64_t>(a.size(), n - at));
        in.read_f32(stored, at, c, a.data());
        in.read_f32("wte.weight", at, c, w.data());
        STRATA_CHECK_CODE(ErrorCode::kIo, std::equal(a.begin(), a.begin() + c, w.begin()),
                          "{}: lm_head.weight differs from wte.weight (at element {} or after): this GPT-2 has no "
                          "tied output layer, which train_gpt's model does",
                          file, at);
      }
      ignored.push_back(stored);
      continue;
    }
    unknown.push_back(stored);
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, missing.empty() && unknown.empty(),
                    "{} does not hold exactly the parameters of {} (docs/gpt-model.md): {}{}{}", file, dims(cfg),
                    unknown.empty() ? "" : fmt::format("{} tensor(s) that are not: {}", unknown.size(),
                                                       gpt::name_list(unknown)),
                    unknown.empty() || missing.empty() ? "" : "; ",
                    missing.empty() ? "" : fmt::format("{} missing: {}", missing.size(), gpt::name_list(missing)));
  return cfg;
}

int run_import(const std::string& in_path, const std::string& path, std::int64_t step) {
  std::error_code dir_ec;
  if (!fs::is_directory(in_path, dir_ec))
    check_input_file(in_path,
                     "IN");  // a FIFO or device is refused before it can block (a directory's files: its reader)
  const SafetensorsReader in(in_path);
  std::vector<std::string> ignored;
  const gpt::GptConfig cfg = infer_gpt(in, ignored);
  const CheckpointDir dir(path);
  prepare_output_dir(path, "DIR");
  // The directory is this import's while it writes (a training job in it would prune or replace what it writes) ...
  const DirLock lock = DirLock::acquire(path, "DIR", "strata-ckpt import");
  if (!lock.takeover().empty()) std::fprintf(stderr, "strata-ckpt: warning: %s\n", lock.takeover().c_str());
  // ... and holds no run: an import beside one would re-point its latest, and a --resume would load the import.
  STRATA_CHECK_CODE(ErrorCode::kIo, !dir.holds_checkpoints(),
                    "{} already holds checkpoints{}: an import there would point its latest at the import's step {}, "
                    "and a --resume would load the imported weights instead of that run's. Import into a new or "
                    "empty directory",
                    path,
                    dir.latest_step() >= 0 ? fmt::format(" (latest {})", CheckpointDir::step_name(dir.latest_step()))
                                           : std::string(),
                    step);
  std::error_code ec;

  CheckpointIndex index;
  index.step = step;
  index.world_size = 1;
  index.units = gpt::gpt_units(cfg);
  index.block_bytes = CheckpointOptions{}.block_bytes;
  index.layout = {{"imported_from", in_path}};
  // No "optimizer" object and no moments: the loader starts AdamW from zero moments at step 0. The trainer's
  // position is the start of the data; its configuration is the run's own.
  gpt::GptTrainerState trainer;  // the start of the data; the configuration is the resuming run's own
  trainer.next_step = step;
  index.state = {{"trainer", trainer.to_json()},
                 {"import", {{"source", in_path}, {"metadata", in.metadata()}, {"ignored", ignored}}}};

  // The same steps as Checkpointer::commit: everything into step-N.tmp, flushed; the index, then the marker; the
  // directory renamed to its final name and flushed; `latest` last.
  const std::string tmp = dir.tmp_path(step);
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "cannot create {}: {}", tmp, ec.message());
  const std::string file_name = CheckpointDir::rank_file(0);
  const std::uint64_t piece = kPieceBlocks * index.block_bytes / 4;
  std::vector<float> values(piece);
  std::uint64_t file_bytes = 0;
  {
    ChunkWriter writer(tmp + "/" + file_name, index.block_bytes);
    for (const UnitSpec& u : index.units)
      for (const SlotSpec& s : u.slots) {
        TensorRecord t{params_tensor(s.name), s.shape, DType::kF32, {}};
        std::uint64_t n = 1;
        for (std::int64_t d : s.shape) n *= static_cast<std::uint64_t>(d);
        if (n > 0) {
          ChunkRecord c;
          c.file = 0;
          c.box_offset.assign(s.shape.size(), 0);
          c.box_shape = s.shape;
          c.begin = 0;
          c.count = n;
          // One chunk per tensor, appended a piece at a time: a piece is a whole number of blocks, so the pieces'
          // block checksums, in order, are the chunk's.
          for (std::uint64_t at = 0; at < n; at += piece) {
            const std::uint64_t count = std::min(piece, n - at);
            in.read_f32(s.name, at, count, values.data());
            // What a resume would refuse is refused here, before anything is committed.
            const std::size_t bad = first_bad_value(t.name, values.data(), count);
            if (bad < count) {
              fs::remove_all(tmp, ec);
              STRATA_THROW(ErrorCode::kInvalidArgument, "import: {}: {}; nothing was imported", in_path,
                           describe_bad_value(s.name, at + bad, values[bad]));
            }
            std::vector<std::uint32_t> crc;
            const std::uint64_t offset = writer.append(values.data(), count * 4, crc);
            if (at == 0) c.offset = offset;
            c.crc32.insert(c.crc32.end(), crc.begin(), crc.end());
          }
          t.chunks.push_back(std::move(c));
        }
        index.tensors.emplace(t.name, std::move(t));
      }
    writer.finish();
    file_bytes = writer.bytes();
  }
  index.files.push_back(FileRecord{file_name, file_bytes});
  const std::string problem = index.coverage_problem();
  STRATA_CHECK_CODE(ErrorCode::kInternal, problem.empty(), "import into {}: {}", tmp, problem);
  // What a load will check, checked before anything is committed: the index as parsed back, and every block written.
  const std::string text = index.serialize();
  const CheckpointIndex parsed = CheckpointIndex::parse(text, tmp + "/index.json");
  {
    const ChunkReader reader(tmp + "/" + file_name, file_bytes, parsed.block_bytes);
    std::vector<char> staging(parsed.block_bytes);
    for (const auto& [name, t] : parsed.tensors)
      for (const ChunkRecord& c : t.chunks) reader.verify(c, name, 4, staging.data());
  }
  dir.commit(parsed);
  const std::string final_dir = dir.step_path(step);

  std::printf(
      "import: %s -> %s: %s (any --heads dividing %d), %zu tensors, %llu bytes%s\n", in_path.c_str(), final_dir.c_str(),
      dims(cfg).c_str(), cfg.embd, index.tensors.size(), static_cast<unsigned long long>(file_bytes),
      ignored.empty() ? "" : fmt::format("; ignored {} buffer(s) such as '{}'", ignored.size(), ignored[0]).c_str());
  std::printf(
      "import: resume with: mpirun -np N train_gpt --layers %d --embd %d --vocab %d --ctx %d --heads H "
      "--checkpoint-dir %s --resume\n",
      cfg.layers, cfg.embd, cfg.vocab, cfg.ctx, path.c_str());
  return 0;
}

// ---- assemble -----------------------------------------------------------------------------------------------------

// The parts of one checkpoint that hosts with disks of their own wrote (each holds the index and its own ranks' files)
// put together into one directory, committed as a save would commit it.
int run_assemble(const std::string& out, const std::vector<std::string>& parts, std::int64_t step_flag) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, !parts.empty(), "assemble: no DIR to take the parts from");
  std::vector<CheckpointDir> dirs;
  for (const std::string& p : parts) {
    require_directory(p);
    dirs.emplace_back(p);
  }
  // The step: --step, else the newest that every part has committed.
  std::int64_t step = step_flag;
  if (step < 0) {
    std::vector<std::int64_t> common = dirs[0].committed_steps();
    for (const CheckpointDir& d : dirs) {
      const std::vector<std::int64_t> steps = d.committed_steps();
      std::vector<std::int64_t> both;
      std::set_intersection(common.begin(), common.end(), steps.begin(), steps.end(), std::back_inserter(both));
      common = both;
    }
    STRATA_CHECK_CODE(ErrorCode::kIo, !common.empty(), "assemble: no step is committed in every one of {}",
                      fmt::join(parts, ", "));
    step = common.back();
  }
  // The same index in every part: they are parts of one save.
  const CheckpointIndex index = dirs[0].read_index(step);
  const std::string text = index.serialize();
  for (const CheckpointDir& d : dirs)
    STRATA_CHECK_CODE(ErrorCode::kMismatch, d.read_index(step).serialize() == text,
                      "assemble: {}/index.json differs from {}/index.json: they are not parts of one save",
                      d.step_path(step), dirs[0].step_path(step));
  const CheckpointDir dir(out);
  prepare_output_dir(out, "OUT");
  const DirLock lock = DirLock::acquire(out, "OUT", "strata-ckpt assemble");
  if (!lock.takeover().empty()) std::fprintf(stderr, "strata-ckpt: warning: %s\n", lock.takeover().c_str());
  STRATA_CHECK_CODE(ErrorCode::kIo, !dir.holds_checkpoints(),
                    "{} already holds checkpoints: assemble into a new or empty directory", out);
  const std::string tmp = dir.tmp_path(step);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "cannot create {}: {}", tmp, ec.message());
  // Each file from the first part that holds it whole (the size the index records); every block checked on the way.
  std::vector<char> staging(index.block_bytes);
  std::map<int, std::vector<std::pair<std::string, const ChunkRecord*>>> chunks_of;  // by file
  for (const auto& [name, t] : index.tensors)
    for (const ChunkRecord& c : t.chunks) chunks_of[c.file].emplace_back(name, &c);
  for (std::size_t f = 0; f < index.files.size(); ++f) {
    const FileRecord& file = index.files[f];
    std::string from;
    for (const CheckpointDir& d : dirs) {
      const std::string candidate = d.step_path(step) + "/" + file.name;
      if (fs::is_regular_file(candidate, ec) && fs::file_size(candidate, ec) == file.bytes) {
        from = candidate;
        break;
      }
    }
    STRATA_CHECK_CODE(ErrorCode::kIo, !from.empty(),
                      "assemble: no part holds {} of {} bytes (the index lists it): give the directory of the host "
                      "that wrote it",
                      file.name, file.bytes);
    const ChunkReader reader(from, file.bytes, index.block_bytes);
    for (const auto& [name, c] : chunks_of[static_cast<int>(f)]) reader.verify(*c, name, 4, staging.data());
    fs::copy_file(from, tmp + "/" + file.name, ec);
    STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "assemble: cannot copy {} into {}: {}", from, tmp, ec.message());
    fsync_file(tmp + "/" + file.name);
  }
  dir.commit(CheckpointIndex::parse(text, tmp + "/index.json"));
  std::printf("assemble: %s: %zu files from %zu part(s) -> %s\n", CheckpointDir::step_name(step).c_str(),
              index.files.size(), parts.size(), dir.step_path(step).c_str());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app{"strata-ckpt: list, verify, export and import Strata's sharded checkpoints (docs/checkpoint.md)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  std::string dir, file, dtype = "f32";
  std::int64_t step = -1, import_step = 0;
  bool json = false;

  CLI::App* ls = app.add_subcommand("ls", "one row per committed checkpoint, then the incomplete ones");
  ls->add_option("DIR", dir, "checkpoint directory (train_gpt --checkpoint-dir)")->required();
  ls->add_flag("--json", json, "print JSON");

  CLI::App* verify = app.add_subcommand("verify", "check the index, every block checksum, coverage and file sizes");
  verify->add_option("DIR", dir, "checkpoint directory")->required();
  verify->add_option("--step", step, "the checkpoint of this step (default: the latest)")
      ->check(strata::flags::non_negative_int64());
  verify->add_flag("--json", json, "print JSON");

  CLI::App* exp = app.add_subcommand("export", "the weights as one safetensors file (train_gpt --init, PyTorch)");
  exp->add_option("DIR", dir, "checkpoint directory")->required();
  exp->add_option("OUT", file, "output .safetensors (with --hf: a model directory)")->required();
  exp->add_option("--step", step, "the checkpoint of this step (default: the latest)")
      ->check(strata::flags::non_negative_int64());
  exp->add_option("--dtype", dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  bool hf_dir = false;
  int export_heads = 0;
  std::string shard_size = "5GB";
  exp->add_flag("--hf", hf_dir,
                "OUT is a new Hugging Face model directory: config.json and safetensors shards with their index, as "
                "transformers' save_pretrained writes them");
  exp->add_option("--max-shard-size", shard_size, "with --hf: the most tensor bytes in one shard (default 5GB)");
  exp->add_option("--heads", export_heads, "with --hf: the attention heads, for a checkpoint that records none")
      ->check(strata::flags::positive_integer());

  CLI::App* imp = app.add_subcommand("import", "a checkpoint (weights, zero moments) from a GPT-2 safetensors file");
  imp->add_option("IN", file,
                  "input .safetensors (docs/gpt-model.md's names), or a Hugging Face GPT-2 model directory (its "
                  "model.safetensors or sharded index)")
      ->required()
      ->check(CLI::ExistingPath);
  imp->add_option("DIR", dir, "checkpoint directory to create it in")->required();
  imp->add_option("--step", import_step, "the step it is saved as (the optimizer still starts at step 0)")
      ->check(strata::flags::non_negative_int64());
  std::vector<std::string> parts;
  CLI::App* asm_ = app.add_subcommand("assemble", "one directory from the parts hosts with disks of their own wrote");
  asm_->add_option("OUT", dir, "checkpoint directory to create it in (new or empty)")->required();
  asm_->add_option("DIR", parts, "the hosts' checkpoint directories")->required();
  asm_->add_option("--step", step, "the checkpoint of this step (default: the newest every DIR has committed)")
      ->check(strata::flags::non_negative_int64());
  CLI11_PARSE(app, argc, argv);

  return strata::run_tool("strata-ckpt", [&] {
    if (ls->parsed()) return strata::run_ls(dir, json);
    if (verify->parsed()) return strata::run_verify(dir, step, json);
    if (exp->parsed())
      return hf_dir ? strata::run_export_hf(dir, file, step, dtype, export_heads, shard_size)
                    : strata::run_export(dir, file, step, dtype);
    if (asm_->parsed()) return strata::run_assemble(dir, parts, step);
    return strata::run_import(file, dir, import_step);
  });
}
