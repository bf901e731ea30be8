// step_declaration_json / parse_step_declaration: the declaration's fields one to one, checked by a JsonSchema.
#include "runtime/memory/step_declaration_file.h"

#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "core/json_schema.h"

namespace strata {
namespace {

constexpr const char* kFormat = "strata-step-declaration";
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 53;  // exact in a JSON number
constexpr std::size_t kMaxFileBytes = std::size_t{64} << 20;

std::vector<std::string> category_names() {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < kNumMemCategories; ++i)
    names.emplace_back(mem_category_name(static_cast<MemCategory>(i)));
  return names;
}

MemCategory category_from_name(const std::string& name) {
  for (std::size_t i = 0; i < kNumMemCategories; ++i)
    if (name == mem_category_name(static_cast<MemCategory>(i))) return static_cast<MemCategory>(i);
  STRATA_THROW(ErrorCode::kInternal, "unknown memory category '{}'", name);  // the schema admits the names alone
}

const JsonSchema& schema() {
  const JsonSchema count = JsonSchema::integer(0, kMaxBytes);
  const JsonSchema ranks = JsonSchema::integer(1, 1 << 24);
  const JsonSchema dtype = JsonSchema::one_of({"f32", "bf16", "f16"});
  const JsonSchema slot = JsonSchema::object(
      {required("name", JsonSchema::string(4096)), required("shape", JsonSchema::array(count, 16)),
       optional("weight_decay", JsonSchema::boolean()), optional("trainable", JsonSchema::boolean())});
  const JsonSchema unit = JsonSchema::object(
      {required("name", JsonSchema::string(4096)), required("slots", JsonSchema::array(slot, 1 << 20))});
  const JsonSchema pools = JsonSchema::object({required("params", count), required("grads", count)});
  static const JsonSchema s = JsonSchema::object({
      required("format", JsonSchema::one_of({kFormat})),
      required("version", JsonSchema::integer(1, 1)),
      optional("notes", JsonSchema::string()),
      required("units", JsonSchema::array(unit, 1 << 20)),
      required(
          "sharding",
          JsonSchema::object({required("zero_stage", JsonSchema::integer(0, 3)), required("param_dtype", dtype),
                              required("reduce_dtype", dtype), required("reshard_after_forward", JsonSchema::boolean()),
                              required("prefetch_depth", JsonSchema::integer(0, 1 << 10)),
                              required("offload", JsonSchema::one_of({"none", "optimizer", "optimizer+params"})),
                              required("align_elements", JsonSchema::integer(1, 1 << 20))})),
      required("groups", JsonSchema::object({required("dp_shard", ranks), required("dp_replicate", ranks)})),
      required("optimizer", JsonSchema::object({required("floats_per_element", JsonSchema::integer(0, 64)),
                                                required("nonfinite_flags", JsonSchema::boolean())})),
      optional("held", pools),
      optional("kept_open", pools),
      required("buffers", JsonSchema::array(
                              JsonSchema::object({required("name", JsonSchema::string(4096)),
                                                  required("category", JsonSchema::one_of(category_names())),
                                                  required("bytes", count), optional("host", JsonSchema::boolean())}),
                              1 << 16)),
  });
  return s;
}

nlohmann::ordered_json pools_json(const PoolPeaks& p) { return {{"params", p.params}, {"grads", p.grads}}; }

PoolPeaks pools_from(const nlohmann::json& j) {
  return PoolPeaks{j.at("params").get<std::uint64_t>(), j.at("grads").get<std::uint64_t>()};
}

}  // namespace

std::string step_declaration_json(const StepDeclaration& d) {
  nlohmann::ordered_json units = nlohmann::ordered_json::array();
  for (const UnitSpec& u : d.units) {
    nlohmann::ordered_json slots = nlohmann::ordered_json::array();
    for (const SlotSpec& s : u.slots)
      slots.push_back(
          {{"name", s.name}, {"shape", s.shape}, {"weight_decay", s.weight_decay}, {"trainable", s.trainable}});
    units.push_back({{"name", u.name}, {"slots", std::move(slots)}});
  }
  nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
  for (const DeclaredBuffer& b : d.buffers)
    buffers.push_back(
        {{"name", b.name}, {"category", mem_category_name(b.category)}, {"bytes", b.bytes}, {"host", b.host}});
  const ShardingOptions& o = d.sharding;
  const nlohmann::ordered_json doc = {
      {"format", kFormat},
      {"version", 1},
      {"units", std::move(units)},
      {"sharding",
       {{"zero_stage", static_cast<int>(o.stage)},
        {"param_dtype", dtype_name(o.mixed_precision.param_dtype)},
        {"reduce_dtype", dtype_name(o.mixed_precision.reduce_dtype)},
        {"reshard_after_forward", o.reshard_after_forward},
        {"prefetch_depth", o.prefetch_depth},
        {"offload", offload_name(o.offload)},
        {"align_elements", o.align_elements}}},
      {"groups", {{"dp_shard", d.groups.shard}, {"dp_replicate", d.groups.replicate}}},
      {"optimizer", {{"floats_per_element", d.optimizer_floats}, {"nonfinite_flags", d.optimizer_flags}}},
      {"held", pools_json(d.held)},
      {"kept_open", pools_json(d.kept_open)},
      {"buffers", std::move(buffers)},
  };
  return doc.dump(1) + "\n";
}

namespace {

StepDeclaration from_json(const nlohmann::json& doc, const std::string& origin) {
  schema().check(doc, origin);
  StepDeclaration d;
  std::uint64_t elements = 0;
  for (const nlohmann::json& u : doc["units"]) {
    UnitSpec unit{u["name"].get<std::string>(), {}};
    for (const nlohmann::json& s : u["slots"]) {
      SlotSpec slot;
      slot.name = s["name"].get<std::string>();
      slot.shape = s["shape"].get<std::vector<std::int64_t>>();
      slot.weight_decay = s.value("weight_decay", true);
      slot.trainable = s.value("trainable", true);
      std::uint64_t numel = 1;
      for (std::int64_t dim : slot.shape)
        numel = checked_product(fmt::format("{}: the elements of '{}'", origin, slot.name).c_str(), numel, dim);
      elements += numel;
      STRATA_CHECK(elements <= kMaxBytes, "{}: the units hold more than 2^53 elements", origin);
      unit.slots.push_back(std::move(slot));
    }
    d.units.push_back(std::move(unit));
  }
  const nlohmann::json& o = doc["sharding"];
  d.sharding.stage = zero_stage_from_int(o["zero_stage"].get<int>());
  d.sharding.mixed_precision.param_dtype = parse_dtype(o["param_dtype"].get<std::string>());
  d.sharding.mixed_precision.reduce_dtype = parse_dtype(o["reduce_dtype"].get<std::string>());
  d.sharding.reshard_after_forward = o["reshard_after_forward"].get<bool>();
  d.sharding.prefetch_depth = o["prefetch_depth"].get<int>();
  d.sharding.offload = offload_from_name(o["offload"].get<std::string>());
  d.sharding.align_elements = o["align_elements"].get<std::size_t>();
  d.sharding.validate();
  d.groups = DataParallelSizes{doc["groups"]["dp_shard"].get<int>(), doc["groups"]["dp_replicate"].get<int>()};
  d.optimizer_floats = doc["optimizer"]["floats_per_element"].get<int>();
  d.optimizer_flags = doc["optimizer"]["nonfinite_flags"].get<bool>();
  if (doc.contains("held")) d.held = pools_from(doc["held"]);
  if (doc.contains("kept_open")) d.kept_open = pools_from(doc["kept_open"]);
  for (const nlohmann::json& b : doc["buffers"])
    d.buffers.push_back(DeclaredBuffer{b["name"].get<std::string>(), category_from_name(b["category"]),
                                       b["bytes"].get<std::uint64_t>(), b.value("host", false)});
  return d;
}

}  // namespace

StepDeclaration parse_step_declaration(const std::string& text, const std::string& origin) {
  return from_json(parse_json(text, origin), origin);
}

StepDeclaration read_step_declaration(const std::string& path) {
  return from_json(read_json_file(path, "step declaration", kMaxFileBytes), "step declaration " + path);
}

}  // namespace strata
