// CheckpointIndex: JSON form and validation.
#include "runtime/checkpoint/checkpoint_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "core/error.h"

namespace strata {
namespace {

constexpr int kMaxJsonDepth = 64;  // an index nests about 6 levels; a trainer's state a few more

// Every parse error is kIo naming the index and the place in it.
[[noreturn]] void bad(const std::string& where, const std::string& what) {
  STRATA_THROW(ErrorCode::kIo, "checkpoint index {}: {}", where, what);
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, nlohmann::json::value_t type,
                            const std::string& where, const std::string& path) {
  if (!j.is_object()) bad(where, fmt::format("{} is not an object", path));
  auto it = j.find(key);
  if (it == j.end()) bad(where, fmt::format("{} has no \"{}\"", path, key));
  const bool ok = type == nlohmann::json::value_t::number_unsigned
                      ? it->is_number_unsigned() || (it->is_number_integer() && it->get<std::int64_t>() >= 0)
                  : type == nlohmann::json::value_t::number_integer ? it->is_number_integer()
                                                                    : it->type() == type;
  if (!ok) bad(where, fmt::format("{}.{} has the wrong type", path, key));
  return *it;
}

std::uint64_t unsigned_field(const nlohmann::json& j, const char* key, const std::string& where,
                             const std::string& path) {
  return field(j, key, nlohmann::json::value_t::number_unsigned, where, path).get<std::uint64_t>();
}

std::vector<std::int64_t> shape_field(const nlohmann::json& j, const char* key, const std::string& where,
                                      const std::string& path) {
  const nlohmann::json& a = field(j, key, nlohmann::json::value_t::array, where, path);
  if (a.size() > 8) bad(where, fmt::format("{}.{} has {} dimensions", path, key, a.size()));
  std::vector<std::int64_t> out;
  for (const nlohmann::json& d : a) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0 || d.get<std::int64_t>() > (std::int64_t{1} << 40))
      bad(where, fmt::format("{}.{} holds {}, not a dimension", path, key, d.dump()));
    out.push_back(d.get<std::int64_t>());
  }
  return out;
}

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
std::string exp_avg_tensor(const std::string& slot) { return "exp_avg/" + slot; }
std::string exp_avg_sq_tensor(const std::string& slot) { return "exp_avg_sq/" + slot; }

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

std::string CheckpointIndex::serialize() const { return to_json().dump(1); }

CheckpointIndex CheckpointIndex::parse(const std::string& text, const std::string& where) {
  using V = nlohmann::json::value_t;
  // Nesting is bounded while parsing: copying or printing a value nested thousands deep recurses past the stack
  // (nlohmann::json's parser itself does not recurse).
  bool too_deep = false;
  nlohmann::json j = nlohmann::json::parse(
      text,
      [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > kMaxJsonDepth) too_deep = true;
        return !too_deep;
      },
      /*allow_exceptions=*/false);
  if (too_deep) bad(where, fmt::format("nested deeper than {} levels", kMaxJsonDepth));
  if (j.is_discarded()) bad(where, "not valid JSON");
  if (!j.is_object()) bad(where, "not a JSON object");
  if (!j.contains("format") || !j["format"].is_string() || j["format"].get<std::string>() != kCheckpointFormatName)
    bad(where, fmt::format("not a {} index (its \"format\" field is missing or different)", kCheckpointFormatName));
  CheckpointIndex x;
  const std::int64_t version = field(j, "version", V::number_integer, where, "index").get<std::int64_t>();
  if (version > kCheckpointFormatVersion)
    bad(where, fmt::format("format version {} was written by a newer Strata (this one reads up to {})", version,
                           kCheckpointFormatVersion));
  if (version < 1) bad(where, fmt::format("format version {} does not exist", version));
  x.version = static_cast<int>(version);
  x.step = field(j, "step", V::number_integer, where, "index").get<std::int64_t>();
  if (x.step < 0) bad(where, fmt::format("step {} is negative", x.step));
  const std::uint64_t world = unsigned_field(j, "world_size", where, "index");
  if (world < 1 || world > (1u << 24)) bad(where, fmt::format("world_size {} is not a rank count", world));
  x.world_size = static_cast<int>(world);
  x.layout = field(j, "layout", V::object, where, "index");
  x.state = field(j, "state", V::object, where, "index");
  x.block_bytes = unsigned_field(j, "block_bytes", where, "index");
  if (x.block_bytes < 64 || x.block_bytes > (std::uint64_t{1} << 30))
    bad(where, fmt::format("block_bytes {} is outside [64, 2^30]", x.block_bytes));

  const nlohmann::json& model = field(j, "model", V::object, where, "index");
  const nlohmann::json& units = field(model, "units", V::array, where, "model");
  for (std::size_t u = 0; u < units.size(); ++u) {
    const std::string path = fmt::format("model.units[{}]", u);
    UnitSpec spec;
    spec.name = field(units[u], "name", V::string, where, path).get<std::string>();
    const nlohmann::json& slots = field(units[u], "slots", V::array, where, path);
    for (std::size_t s = 0; s < slots.size(); ++s) {
      const std::string sp = fmt::format("{}.slots[{}]", path, s);
      SlotSpec slot;
      slot.name = field(slots[s], "name", V::string, where, sp).get<std::string>();
      slot.shape = shape_field(slots[s], "shape", where, sp);
      slot.weight_decay = field(slots[s], "weight_decay", V::boolean, where, sp).get<bool>();
      slot.trainable = field(slots[s], "trainable", V::boolean, where, sp).get<bool>();
      numel_checked(slot.shape, where, sp);
      spec.slots.push_back(std::move(slot));
    }
    x.units.push_back(std::move(spec));
  }

  const nlohmann::json& files = field(j, "files", V::array, where, "index");
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string path = fmt::format("files[{}]", f);
    FileRecord r;
    r.name = field(files[f], "name", V::string, where, path).get<std::string>();
    if (r.name.empty() || r.name.find('/') != std::string::npos || r.name == "." || r.name == "..")
      bad(where, fmt::format("{} names '{}', not a file of the checkpoint's directory", path, r.name));
    r.bytes = unsigned_field(files[f], "bytes", where, path);
    x.files.push_back(std::move(r));
  }

  const nlohmann::json& tensors = field(j, "tensors", V::object, where, "index");
  for (const auto& [name, tj] : tensors.items()) {
    const std::string path = fmt::format("tensors[\"{}\"]", name);
    TensorRecord t;
    t.name = name;
    t.shape = shape_field(tj, "shape", where, path);
    const std::string dtype = field(tj, "dtype", V::string, where, path).get<std::string>();
    if (dtype != "f32" && dtype != "bf16" && dtype != "f16")
      bad(where, fmt::format("{} has dtype '{}' (a checkpoint holds f32, bf16 or f16)", path, dtype));
    t.dtype = parse_dtype(dtype);
    const std::uint64_t esz = dtype_size(t.dtype);
    const std::uint64_t n = numel_checked(t.shape, where, path);
    const nlohmann::json& chunks = field(tj, "chunks", V::array, where, path);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const std::string cp = fmt::format("{}.chunks[{}]", path, c);
      ChunkRecord r;
      const std::uint64_t file = unsigned_field(chunks[c], "file", where, cp);
      if (file >= x.files.size()) bad(where, fmt::format("{} names file {} of {}", cp, file, x.files.size()));
      r.file = static_cast<int>(file);
      r.offset = unsigned_field(chunks[c], "offset", where, cp);
      r.box_offset = shape_field(chunks[c], "box_offset", where, cp);
      r.box_shape = shape_field(chunks[c], "box_shape", where, cp);
      if (r.box_offset.size() != t.shape.size() || r.box_shape.size() != t.shape.size())
        bad(where, fmt::format("{}'s box has {} / {} dimensions, the tensor {}", cp, r.box_offset.size(),
                               r.box_shape.size(), t.shape.size()));
      for (std::size_t d = 0; d < t.shape.size(); ++d)
        if (r.box_offset[d] + r.box_shape[d] > t.shape[d])
          bad(where, fmt::format("{}'s box leaves the tensor in dimension {}", cp, d));
      const std::uint64_t box_n = numel_checked(r.box_shape, where, cp);
      r.begin = unsigned_field(chunks[c], "begin", where, cp);
      r.count = unsigned_field(chunks[c], "count", where, cp);
      if (r.count == 0 || r.begin > box_n || r.count > box_n - r.begin)
        bad(where, fmt::format("{} holds elements [{}, {}) of a box of {}", cp, r.begin, r.begin + r.count, box_n));
      const std::uint64_t bytes = r.count * esz;
      const FileRecord& fr = x.files[file];
      if (r.offset > fr.bytes || bytes > fr.bytes - r.offset)
        bad(where, fmt::format("{} (bytes [{}, {})) lies outside {} ({} bytes)", cp, r.offset, r.offset + bytes,
                               fr.name, fr.bytes));
      const nlohmann::json& crcs = field(chunks[c], "crc32", V::array, where, cp);
      const std::uint64_t blocks = (bytes + x.block_bytes - 1) / x.block_bytes;
      if (crcs.size() != blocks)
        bad(where, fmt::format("{} has {} checksums for its {} blocks", cp, crcs.size(), blocks));
      for (const nlohmann::json& crc : crcs) {
        if (!crc.is_number_unsigned() || crc.get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max())
          bad(where, fmt::format("{} has a checksum that is not a 32-bit value", cp));
        r.crc32.push_back(crc.get<std::uint32_t>());
      }
      (void)n;
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
