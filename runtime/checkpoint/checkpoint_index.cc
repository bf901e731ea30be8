// CheckpointIndex: JSON form and validation.
#include "runtime/checkpoint/checkpoint_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <tuple>

#include "core/error.h"
#include "core/json_schema.h"
#include "runtime/checkpoint/chunk_file.h"

namespace strata {
namespace {

// Every parse error is kIo naming the index and the place in it.
[[noreturn]] void bad(const std::string& where, const std::string& what) {
  STRATA_THROW(ErrorCode::kIo, "checkpoint index {}: {}", where, what);
}

constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 62;  // offsets, sizes, element counts, steps
constexpr const char* kChecksumKey = "index_crc32";
// What serialize() puts after the index's last field: the checksum of every byte before it.
constexpr const char* kChecksumLead = ",\n \"index_crc32\": ";

// The index's types and ranges, checked before anything is read from it. Fields a version does not know are
// reported (the loader names them in a warning) rather than refused: a newer writer may add fields older readers skip.
const JsonSchema& index_schema() {
  using S = JsonSchema;
  const S shape = S::array(S::integer(0, std::uint64_t{1} << 40), 8);
  const S count = S::integer(0, kMaxCount);
  const S slot = S::object({required("name", S::string(4096)), required("shape", shape),
                            required("weight_decay", S::boolean()), required("trainable", S::boolean())},
                           S::Unknown::kReport);
  const S unit = S::object({required("name", S::string(4096)), required("slots", S::array(slot))}, S::Unknown::kReport);
  const S file = S::object({required("name", S::string(4096)), required("bytes", count)}, S::Unknown::kReport);
  const S chunk = S::object({required("file", S::integer(0, 1 << 30)), required("offset", count),
                             required("box_offset", shape), required("box_shape", shape), required("begin", count),
                             required("count", count), required("crc32", S::array(S::integer(0, UINT32_MAX)))},
                            S::Unknown::kReport);
  const S tensor = S::object({required("shape", shape), required("dtype", S::string(64)),
                              required("chunks", S::array(chunk))},
                             S::Unknown::kReport);
  const S degree = S::integer(1, 1 << 24);
  const S layout = S::object({optional("mesh", S::object({optional("pp", degree), optional("dp_replicate", degree),
                                                          optional("dp_shard", degree), optional("tp", degree)},
                                                         S::Unknown::kReport)),
                              optional("zero_stage", S::integer(0, 3)), optional("param_dtype", S::string(64)),
                              optional("reduce_dtype", S::string(64)), optional("offload", S::string(64)),
                              optional("imported_from", S::string())},
                             S::Unknown::kReport);
  const S real = S::number(0, 1e30);
  // Any optimizer's (OptimizerState): its kind, step and per-element tensors; AdamW's scalars typed; the rest of an
  // optimizer's own scalars kept for it (its restore() checks them).
  const S optimizer = S::object(
      {required("name", S::string(64)), required("step", count), optional("tensors", S::array(S::string(64), 64)),
       optional("loss_scale", S::number(0, 3.4e38, true)), optional("good_steps", S::integer(0, INT32_MAX)),
       optional("config",
                S::object({optional("lr", real), optional("beta1", S::number(0, 1)), optional("beta2", S::number(0, 1)),
                           optional("eps", real), optional("weight_decay", real)},
                          S::Unknown::kAllow))},
      S::Unknown::kAllow);
  // state.trainer is the trainer's own (it checks it against its own schema when it resumes: models/gpt).
  const S state = S::object({optional("optimizer", optimizer), optional("trainer", S::map(S::any())),
                             optional("import", S::map(S::any()))},
                            S::Unknown::kReport);
  static const S s = S::object({required("format", S::string(256)), required("version", S::integer(1, INT32_MAX)),
                                required("step", count), required("world_size", degree), required("layout", layout),
                                required("model", S::object({required("units", S::array(unit))}, S::Unknown::kReport)),
                                required("block_bytes", S::integer(64, std::uint64_t{1} << 30)),
                                required("files", S::array(file)), required("tensors", S::map(tensor)),
                                required("state", state), optional(kChecksumKey, S::integer(0, UINT32_MAX))},
                               S::Unknown::kReport);
  return s;
}

// The index's own checksum: the text must end with kChecksumLead, the CRC-32 of every byte before it, and "\n}"
// (serialize()'s form). Throws kIo when it does not.
void check_index_checksum(const std::string& text, std::uint64_t recorded, const std::string& where) {
  std::size_t end = text.size();
  while (end > 0 && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const std::size_t lead = text.rfind(kChecksumLead);
  const std::size_t digits = lead == std::string::npos ? 0 : lead + std::char_traits<char>::length(kChecksumLead);
  const bool in_place = lead != std::string::npos && end >= digits + 3 && text.compare(end - 2, 2, "\n}") == 0 &&
                        text.substr(digits, end - 2 - digits) == std::to_string(recorded);
  if (!in_place)
    bad(where, fmt::format("its checksum (\"{}\": {}) is not its last field, where Strata writes it: the index was "
                           "rewritten by another program, so its contents cannot be checked. Restore the original, or "
                           "remove the field to load it unchecked",
                           kChecksumKey, recorded));
  const std::uint32_t actual = crc32_of(text.data(), lead);
  if (actual != recorded)
    bad(where, fmt::format("its contents do not match its checksum (\"{}\": {}, the bytes before it give {}): the "
                           "index changed after it was written (a flipped bit on disk, or an edit)",
                           kChecksumKey, recorded, actual));
}

std::vector<std::int64_t> shape_of(const nlohmann::json& a) { return a.get<std::vector<std::int64_t>>(); }

// The element count of a shape, refusing one that does not fit 2^50.
std::uint64_t numel_checked(const std::vector<std::int64_t>& shape, const std::string& where, const std::string& what) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d != 0 && n > (std::uint64_t{1} << 50) / static_cast<std::uint64_t>(d))
      bad(where, fmt::format("{} has more than 2^50 elements", what));
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

nlohmann::json slot_json(const SlotSpec& s) {
  return {{"name", s.name}, {"shape", s.shape}, {"weight_decay", s.weight_decay}, {"trainable", s.trainable}};
}

// "the box at [0, 16] of shape [32, 16]"
std::string box_string(const ChunkRecord& c) {
  return fmt::format("the box at {} of shape {}", shape_string(c.box_offset), shape_string(c.box_shape));
}

bool same_box(const ChunkRecord& a, const ChunkRecord& b) {
  return a.box_offset == b.box_offset && a.box_shape == b.box_shape;
}

std::uint64_t box_numel(const ChunkRecord& c) {
  std::uint64_t n = 1;
  for (std::int64_t d : c.box_shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

// The tensor's chunks in box order, then by begin.
std::vector<const ChunkRecord*> sorted_chunks(const TensorRecord& t) {
  std::vector<const ChunkRecord*> out;
  for (const ChunkRecord& c : t.chunks) out.push_back(&c);
  std::sort(out.begin(), out.end(), [](const ChunkRecord* a, const ChunkRecord* b) { return chunk_before(*a, *b); });
  return out;
}

// "" unless two distinct boxes among `sorted` (chunks in box order) share an element; then a sentence naming them.
// Boxes are swept in order of their offset in dimension 0, so a tensor-parallel layout (a few boxes side by side) costs
// about one comparison per box.
std::string intersecting_boxes(const std::vector<const ChunkRecord*>& sorted) {
  std::vector<const ChunkRecord*> boxes;
  for (const ChunkRecord* c : sorted)
    if (boxes.empty() || !same_box(*boxes.back(), *c)) boxes.push_back(c);
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const ChunkRecord& a = *boxes[i];
    if (a.box_offset.empty()) continue;  // a scalar has one box
    for (std::size_t j = i + 1; j < boxes.size(); ++j) {
      const ChunkRecord& b = *boxes[j];
      if (b.box_offset[0] >= a.box_offset[0] + a.box_shape[0]) break;
      bool meet = true;
      for (std::size_t d = 0; d < a.box_offset.size() && meet; ++d)
        meet = a.box_offset[d] < b.box_offset[d] + b.box_shape[d] && b.box_offset[d] < a.box_offset[d] + a.box_shape[d];
      if (meet) return fmt::format("{} and {} intersect", box_string(a), box_string(b));
    }
  }
  return {};
}

}  // namespace

bool ChunkRecord::whole_box(const std::vector<std::int64_t>& shape) const {
  return box_shape == shape && std::all_of(box_offset.begin(), box_offset.end(), [](std::int64_t o) { return o == 0; });
}

std::uint64_t TensorRecord::numel() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

bool chunk_before(const ChunkRecord& a, const ChunkRecord& b) {
  return std::tie(a.box_offset, a.box_shape, a.begin) < std::tie(b.box_offset, b.box_shape, b.begin);
}

std::string params_tensor(const std::string& slot) { return "params/" + slot; }
std::string optimizer_tensor(const std::string& tensor, const std::string& slot) { return tensor + "/" + slot; }
std::string exp_avg_tensor(const std::string& slot) { return optimizer_tensor("exp_avg", slot); }
std::string exp_avg_sq_tensor(const std::string& slot) { return optimizer_tensor("exp_avg_sq", slot); }

std::vector<std::string> saved_optimizer_tensors(const nlohmann::json& optimizer) {
  if (optimizer.is_object() && optimizer.contains("tensors"))
    return optimizer["tensors"].get<std::vector<std::string>>();
  return {"exp_avg", "exp_avg_sq"};
}

std::string saved_optimizer_kind(const nlohmann::json& optimizer) {
  return optimizer.is_object() ? optimizer.value("name", std::string()) : std::string();
}

nlohmann::json CheckpointIndex::to_json() const {
  nlohmann::json units_json = nlohmann::json::array();
  for (const UnitSpec& u : units) {
    nlohmann::json slots = nlohmann::json::array();
    for (const SlotSpec& s : u.slots) slots.push_back(slot_json(s));
    units_json.push_back({{"name", u.name}, {"slots", slots}});
  }
  nlohmann::json files_json = nlohmann::json::array();
  for (const FileRecord& f : files) files_json.push_back({{"name", f.name}, {"bytes", f.bytes}});
  nlohmann::json tensors_json = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    nlohmann::json chunks = nlohmann::json::array();
    for (const ChunkRecord& c : t.chunks)
      chunks.push_back({{"file", c.file},
                        {"offset", c.offset},
                        {"box_offset", c.box_offset},
                        {"box_shape", c.box_shape},
                        {"begin", c.begin},
                        {"count", c.count},
                        {"crc32", c.crc32}});
    tensors_json[name] = {{"shape", t.shape}, {"dtype", dtype_name(t.dtype)}, {"chunks", chunks}};
  }
  return {{"format", kCheckpointFormatName},
          {"version", version},
          {"step", step},
          {"world_size", world_size},
          {"layout", layout},
          {"model", {{"units", units_json}}},
          {"block_bytes", block_bytes},
          {"files", files_json},
          {"tensors", tensors_json},
          {"state", state}};
}

std::string CheckpointIndex::serialize() const {
  // to_json().dump(1) ends in "\n}": the checksum of everything before goes in as the last field.
  std::string text = to_json().dump(1);
  text.resize(text.size() - 2);
  const std::uint32_t crc = crc32_of(text.data(), text.size());
  return text + kChecksumLead + std::to_string(crc) + "\n}";
}

CheckpointIndex CheckpointIndex::parse(const std::string& text, const std::string& where) {
  const nlohmann::json j = parse_json(text, "checkpoint index " + where, ErrorCode::kIo);
  if (!j.is_object()) bad(where, "not a JSON object");
  if (!j.contains("format") || !j["format"].is_string() || j["format"].get<std::string>() != kCheckpointFormatName)
    bad(where, fmt::format("not a {} index (its \"format\" field is missing or different)", kCheckpointFormatName));
  // The version before anything else: a newer one may have other fields, and another checksum.
  if (j.contains("version") && j["version"].is_number_integer()) {
    const std::int64_t version = j["version"].get<std::int64_t>();
    if (version > kCheckpointFormatVersion)
      bad(where, fmt::format("format version {} was written by a newer Strata (this one reads up to {})", version,
                             kCheckpointFormatVersion));
    if (version < 1) bad(where, fmt::format("format version {} does not exist", version));
  }
  CheckpointIndex x;
  const std::vector<std::string> unknown = index_schema().check(j, "checkpoint index " + where, ErrorCode::kIo);
  x.unknown_fields = unknown;
  x.checksummed = j.contains(kChecksumKey);
  if (x.checksummed) check_index_checksum(text, j[kChecksumKey].get<std::uint64_t>(), where);
  // From here every field is present, of its type and in its range; what follows checks how they fit together.
  x.version = j["version"].get<int>();
  x.step = j["step"].get<std::int64_t>();
  x.world_size = j["world_size"].get<int>();
  x.layout = j["layout"];
  x.state = j["state"];
  x.block_bytes = j["block_bytes"].get<std::uint64_t>();

  const nlohmann::json& units = j["model"]["units"];
  for (std::size_t u = 0; u < units.size(); ++u) {
    const std::string path = fmt::format("model.units[{}]", u);
    UnitSpec spec;
    spec.name = units[u]["name"].get<std::string>();
    const nlohmann::json& slots = units[u]["slots"];
    for (std::size_t s = 0; s < slots.size(); ++s) {
      SlotSpec slot;
      slot.name = slots[s]["name"].get<std::string>();
      slot.shape = shape_of(slots[s]["shape"]);
      slot.weight_decay = slots[s]["weight_decay"].get<bool>();
      slot.trainable = slots[s]["trainable"].get<bool>();
      numel_checked(slot.shape, where, fmt::format("{}.slots[{}]", path, s));
      spec.slots.push_back(std::move(slot));
    }
    x.units.push_back(std::move(spec));
  }

  const nlohmann::json& files = j["files"];
  for (std::size_t f = 0; f < files.size(); ++f) {
    FileRecord r;
    r.name = files[f]["name"].get<std::string>();
    if (r.name.empty() || r.name.find('/') != std::string::npos || r.name == "." || r.name == "..")
      bad(where, fmt::format("files[{}] names '{}', not a file of the checkpoint's directory", f, r.name));
    r.bytes = files[f]["bytes"].get<std::uint64_t>();
    x.files.push_back(std::move(r));
  }

  for (const auto& [name, tj] : j["tensors"].items()) {
    const std::string path = fmt::format("tensors[\"{}\"]", name);
    TensorRecord t;
    t.name = name;
    t.shape = shape_of(tj["shape"]);
    const std::string dtype = tj["dtype"].get<std::string>();
    if (dtype != "f32" && dtype != "bf16" && dtype != "f16")
      bad(where, fmt::format("{} has dtype '{}' (a checkpoint holds f32, bf16 or f16)", path, dtype));
    t.dtype = parse_dtype(dtype);
    const std::uint64_t esz = dtype_size(t.dtype);
    numel_checked(t.shape, where, path);
    const nlohmann::json& chunks = tj["chunks"];
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const std::string cp = fmt::format("{}.chunks[{}]", path, c);
      const nlohmann::json& cj = chunks[c];
      ChunkRecord r;
      const std::uint64_t file = cj["file"].get<std::uint64_t>();
      if (file >= x.files.size()) bad(where, fmt::format("{} names file {} of {}", cp, file, x.files.size()));
      r.file = static_cast<int>(file);
      r.offset = cj["offset"].get<std::uint64_t>();
      r.box_offset = shape_of(cj["box_offset"]);
      r.box_shape = shape_of(cj["box_shape"]);
      if (r.box_offset.size() != t.shape.size() || r.box_shape.size() != t.shape.size())
        bad(where, fmt::format("{}'s box has {} / {} dimensions, the tensor {}", cp, r.box_offset.size(),
                               r.box_shape.size(), t.shape.size()));
      for (std::size_t d = 0; d < t.shape.size(); ++d)
        if (r.box_offset[d] + r.box_shape[d] > t.shape[d])
          bad(where, fmt::format("{}'s box leaves the tensor in dimension {}", cp, d));
      const std::uint64_t box_n = numel_checked(r.box_shape, where, cp);
      r.begin = cj["begin"].get<std::uint64_t>();
      r.count = cj["count"].get<std::uint64_t>();
      if (r.count == 0 || r.begin > box_n || r.count > box_n - r.begin)
        bad(where, fmt::format("{} holds elements [{}, {}) of a box of {}", cp, r.begin, r.begin + r.count, box_n));
      const std::uint64_t bytes = r.count * esz;
      const FileRecord& fr = x.files[file];
      if (r.offset > fr.bytes || bytes > fr.bytes - r.offset)
        bad(where, fmt::format("{} (bytes [{}, {})) lies outside {} ({} bytes)", cp, r.offset, r.offset + bytes,
                               fr.name, fr.bytes));
      const nlohmann::json& crcs = cj["crc32"];
      const std::uint64_t blocks = (bytes + x.block_bytes - 1) / x.block_bytes;
      if (crcs.size() != blocks)
        bad(where, fmt::format("{} has {} checksums for its {} blocks", cp, crcs.size(), blocks));
      for (const nlohmann::json& crc : crcs) r.crc32.push_back(crc.get<std::uint32_t>());
      t.chunks.push_back(std::move(r));
    }
    std::sort(t.chunks.begin(), t.chunks.end(), chunk_before);
    std::vector<const ChunkRecord*> sorted;
    for (std::size_t c = 0; c < t.chunks.size(); ++c) {
      sorted.push_back(&t.chunks[c]);
      if (c == 0) continue;
      const ChunkRecord& a = t.chunks[c - 1];
      const ChunkRecord& b = t.chunks[c];
      if (same_box(a, b) && a.begin + a.count > b.begin)
        bad(where, fmt::format("{} has overlapping chunks at elements {} and {}{}", path, a.begin, b.begin,
                               a.whole_box(t.shape) ? "" : " of " + box_string(a)));
    }
    const std::string crossing = intersecting_boxes(sorted);
    if (!crossing.empty()) bad(where, fmt::format("{} has overlapping chunks: {}", path, crossing));
    x.tensors.emplace(name, std::move(t));
  }
  return x;
}

const TensorRecord& CheckpointIndex::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  STRATA_CHECK_CODE(ErrorCode::kIo, it != tensors.end(), "checkpoint of step {} has no tensor '{}'", step, name);
  return it->second;
}

void CheckpointIndex::check_model(const std::vector<UnitSpec>& declared, const std::string& where) const {
  auto describe = [](const SlotSpec& s) {
    return fmt::format("'{}' {} weight_decay {} trainable {}", s.name, shape_string(s.shape), s.weight_decay,
                       s.trainable);
  };
  STRATA_CHECK_CODE(ErrorCode::kMismatch, declared.size() == units.size(),
                    "checkpoint {} holds another model: {} units, this model declares {}", where, units.size(),
                    declared.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    const UnitSpec& a = units[u];
    const UnitSpec& b = declared[u];
    STRATA_CHECK_CODE(ErrorCode::kMismatch, a.name == b.name && a.slots.size() == b.slots.size(),
                      "checkpoint {} holds another model: its unit {} is '{}' with {} slots, this model's is '{}' "
                      "with {}",
                      where, u, a.name, a.slots.size(), b.name, b.slots.size());
    for (std::size_t s = 0; s < a.slots.size(); ++s) {
      const SlotSpec& x = a.slots[s];
      const SlotSpec& y = b.slots[s];
      STRATA_CHECK_CODE(ErrorCode::kMismatch,
                        x.name == y.name && x.shape == y.shape && x.weight_decay == y.weight_decay &&
                            x.trainable == y.trainable,
                        "checkpoint {} holds another model: unit '{}' slot {} is {} there, {} here", where, a.name, s,
                        describe(x), describe(y));
    }
  }
}

std::string CheckpointIndex::coverage_problem() const {
  for (const auto& [name, t] : tensors) {
    const std::vector<const ChunkRecord*> sorted = sorted_chunks(t);
    // Each box's chunks tile the box ...
    std::uint64_t in_boxes = 0;
    for (std::size_t first = 0; first < sorted.size();) {
      const ChunkRecord& box = *sorted[first];
      // Elements are named as the tensor's when the box is the whole tensor, else as the box's.
      const std::string of = box.whole_box(t.shape) ? "" : " of " + box_string(box);
      const std::uint64_t n = box_numel(box);
      std::uint64_t next = 0;
      std::size_t c = first;
      for (; c < sorted.size() && same_box(box, *sorted[c]); ++c) {
        if (sorted[c]->begin != next)
          return sorted[c]->begin > next
                     ? fmt::format("tensor '{}' has no chunk for elements [{}, {}){}", name, next, sorted[c]->begin, of)
                     : fmt::format("tensor '{}' has elements from {}{} in two chunks", name, sorted[c]->begin, of);
        next = sorted[c]->begin + sorted[c]->count;
      }
      if (next != n) return fmt::format("tensor '{}' has no chunk for elements [{}, {}){}", name, next, n, of);
      in_boxes += n;
      first = c;
    }
    // ... and the boxes tile the tensor: none shares an element with another, and together they hold all of it.
    const std::string crossing = intersecting_boxes(sorted);
    if (!crossing.empty()) return fmt::format("tensor '{}' has elements in two chunks: {}", name, crossing);
    if (sorted.empty() && t.numel() > 0)
      return fmt::format("tensor '{}' has no chunk for elements [0, {})", name, t.numel());
    if (in_boxes < t.numel())
      return fmt::format("tensor '{}' has no chunk for {} of its {} elements (its boxes hold {})", name,
                         t.numel() - in_boxes, t.numel(), in_boxes);
    if (in_boxes > t.numel())  // boxes outside the tensor (parse() refuses them)
      return fmt::format("tensor '{}' of {} elements has boxes of {}", name, t.numel(), in_boxes);
  }
  return {};
}

std::vector<UnitSpec> global_declaration(const std::vector<UnitSpec>& units) {
  std::vector<UnitSpec> out = units;
  for (UnitSpec& u : out)
    for (SlotSpec& s : u.slots) {
      if (!s.tp.replicated()) s.shape = s.tp.global_shape;
      s.tp = TpSplit{};
    }
  return out;
}

}  // namespace strata
