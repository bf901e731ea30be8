// check_weight_names: the file's names against the model's, with Hugging Face's buffers set aside.
#include "models/gpt/model/weight_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace strata::gpt {
namespace {

const std::string kPrefix = "transformer.";

std::string bare(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

// "h.{i}.attn.bias" / "h.{i}.attn.masked_bias" of a block i the model has ("h.{i}." starts one of its names).
bool is_mask_buffer(const std::string& name, const std::set<std::string>& expected) {
  if (name.rfind("h.", 0) != 0) return false;
  const std::size_t dot = name.find('.', 2);
  if (dot == std::string::npos) return false;
  const std::string block = name.substr(0, dot + 1), rest = name.substr(dot + 1);
  if (rest != "attn.bias" && rest != "attn.masked_bias") return false;
  const auto it = expected.lower_bound(block);
  return it != expected.end() && it->rfind(block, 0) == 0;
}

// Whether the file's lm_head.weight is its wte.weight, read a bounded piece at a time.
bool tied_to_wte(const SafetensorsReader& file, const std::string& lm_head) {
  if (!file.contains("wte.weight") || file.info(lm_head).shape != file.info("wte.weight").shape) return false;
  std::vector<float> a(1 << 16), w(1 << 16);
  const std::uint64_t n = file.info(lm_head).numel();
  for (std::uint64_t at = 0; at < n; at += a.size()) {
    const std::size_t c = static_cast<std::size_t>(std::min<std::uint64_t>(a.size(), n - at));
    file.read_f32(lm_head, at, c, a.data());
    file.read_f32("wte.weight", at, c, w.data());
    if (!std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(c), w.begin())) return false;
  }
  return true;
}

}  // namespace

std::string name_list(std::vector<std::string> names, std::size_t cap) {
  std::sort(names.begin(), names.end());
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < cap; ++i) out += fmt::format("{}'{}'", i ? ", " : "", names[i]);
  if (names.size() > cap) out += fmt::format(" and {} more", names.size() - cap);
  return out;
}

void check_weight_names(const SafetensorsReader& file, const std::vector<std::string>& expected,
                        const std::string& what) {
  const std::set<std::string> wanted(expected.begin(), expected.end());
  std::vector<std::string> unknown, missing;
  for (const std::string& name : file.names()) {
    if (wanted.count(name) || wanted.count(bare(name)) || is_mask_buffer(bare(name), wanted)) continue;
    if (bare(name) == "lm_head.weight" && tied_to_wte(file, name)) continue;
    unknown.push_back(name);
  }
  for (const std::string& name : wanted)
    if (!file.contains(name)) missing.push_back(name);
  if (unknown.empty() && missing.empty()) return;
  std::string problems;
  if (!unknown.empty())
    problems += fmt::format("{} tensor(s) that are not parameters of this model: {}", unknown.size(),
                            name_list(unknown));
  if (!missing.empty())
    problems += fmt::format("{}{} parameter(s) missing: {}", unknown.empty() ? "" : "; ", missing.size(),
                            name_list(missing));
  STRATA_THROW(ErrorCode::kIo,
               "{} {} does not match the model's {} parameters (loading is strict, as PyTorch's "
               "load_state_dict(strict=True)): it has {}",
               what, file.path(), wanted.size(), problems);
}

}  // namespace strata::gpt
