// predict_step_memory: the state, the pools' growth and the declared buffers, summed by category.
#include "runtime/memory/step_memory.h"

#include <fmt/format.h>

#include <algorithm>

namespace strata {
namespace {

std::size_t idx(MemCategory c) { return static_cast<std::size_t>(c); }

StateMemory state_of(const StepDeclaration& d) {
  return predict_state_memory(d.units, d.sharding, d.groups, d.optimizer_floats, d.optimizer_flags);
}

// The pools' growth: per pool, the slots beyond its initial ones (held, or kept open beyond them), at its slot size.
CategoryBytes pool_growth(const StepDeclaration& d, const std::vector<PoolPlan>& pools) {
  CategoryBytes b{};
  for (const PoolPlan& p : pools) {
    std::uint64_t held = 0, open = 0;
    if (p.buffer == UnitBuffer::kUnshardedParams) {
      held = d.held.params;
      open = d.kept_open.params;
    } else if (p.buffer == UnitBuffer::kUnshardedGrads) {
      held = d.held.grads;
      open = d.kept_open.grads;
    } else {
      continue;
    }
    const std::uint64_t initial = static_cast<std::uint64_t>(p.initial_slots);
    b[idx(p.category)] += (std::max(held, initial) - initial + open) * p.slot_bytes;
  }
  return b;
}

}  // namespace

void StepDeclaration::add(std::string name, MemCategory category, std::uint64_t bytes) {
  buffers.push_back(DeclaredBuffer{std::move(name), category, bytes, false});
}

void StepDeclaration::add_host(std::string name, MemCategory category, std::uint64_t bytes) {
  buffers.push_back(DeclaredBuffer{std::move(name), category, bytes, true});
}

CategoryBytes predict_step_memory(const StepDeclaration& d) {
  const StateMemory state = state_of(d);
  CategoryBytes b = state.device;
  const CategoryBytes grown = pool_growth(d, state.pools);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] += grown[i];
  for (const DeclaredBuffer& x : d.buffers)
    if (!x.host) b[idx(x.category)] += x.bytes;
  return b;
}

CategoryBytes predict_step_host_memory(const StepDeclaration& d) {
  CategoryBytes b = state_of(d).host;
  for (const DeclaredBuffer& x : d.buffers)
    if (x.host) b[idx(x.category)] += x.bytes;
  return b;
}

std::string declaration_table(const StepDeclaration& d) {
  std::string out = fmt::format("  {:<18} {:>14}  {}\n", "category", "bytes", "what");
  const StateMemory state = state_of(d);
  for (std::size_t i = 0; i < state.device.size(); ++i)
    if (state.device[i] > 0)
      out += fmt::format("  {:<18} {:>14}  Strata's state ({} units)\n", mem_category_name(static_cast<MemCategory>(i)),
                         state.device[i], d.units.size());
  for (std::size_t i = 0; i < state.host.size(); ++i)
    if (state.host[i] > 0)
      out += fmt::format("  {:<18} {:>14}  host: Strata's state under offload\n",
                         mem_category_name(static_cast<MemCategory>(i)), state.host[i]);
  const CategoryBytes grown = pool_growth(d, state.pools);
  for (std::size_t i = 0; i < grown.size(); ++i)
    if (grown[i] > 0)
      out += fmt::format("  {:<18} {:>14}  pool slots the step holds beyond the first\n",
                         mem_category_name(static_cast<MemCategory>(i)), grown[i]);
  for (const DeclaredBuffer& x : d.buffers)
    if (x.bytes > 0)
      out += fmt::format("  {:<18} {:>14}  {}{}\n", mem_category_name(x.category), x.bytes, x.host ? "host: " : "",
                         x.name);
  return out;
}

}  // namespace strata
