// NonFiniteAt's order and the scans of host or device memory for the first NaN or infinity.
#include "runtime/optim/nonfinite.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "collectives/rank_values.h"

namespace strata {
namespace {

// key = unit (11 bits) | slot (10 bits) | element (40 bits) | kind (2 bits: NaN, +inf, -inf).
constexpr std::int64_t kUnitMax = (1 << 11) - 1, kSlotMax = (1 << 10) - 1;
constexpr std::uint64_t kElementMax = (std::uint64_t{1} << 40) - 1;

}  // namespace

std::int64_t NonFiniteAt::key() const {
  const std::int64_t u = std::min<std::int64_t>(unit, kUnitMax), s = std::min<std::int64_t>(slot, kSlotMax);
  const std::int64_t e = static_cast<std::int64_t>(std::min(element, kElementMax));
  const std::int64_t kind = std::isnan(value) ? 0 : value > 0 ? 1 : 2;
  return (((u << 10 | s) << 40 | e) << 2) | kind;
}

NonFiniteAt NonFiniteAt::from_key(std::int64_t key) {
  NonFiniteAt at;
  const std::int64_t kind = key & 3;
  at.value = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
  at.element = static_cast<std::uint64_t>(key >> 2) & kElementMax;
  at.slot = static_cast<int>((key >> 42) & kSlotMax);
  at.unit = static_cast<int>(key >> 52);
  return at;
}

std::size_t first_nonfinite(Device& device, const float* data, std::size_t n, float* value) {
  auto scan = [value](const float* x, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i)
      if (!std::isfinite(x[i])) {
        *value = x[i];
        return i;
      }
    return count;
  };
  if (device.kind() == DeviceKind::kCpu) return scan(data, n);
  std::vector<float> host(std::min<std::size_t>(n, std::size_t{1} << 20));
  for (std::size_t at = 0; at < n; at += host.size()) {
    const std::size_t count = std::min(host.size(), n - at);
    device.copy_to_host(host.data(), data + at, count * 4);
    const std::size_t i = scan(host.data(), count);
    if (i < count) return at + i;
  }
  return n;
}

NonFiniteAt find_nonfinite(ShardedParameters& params, ShardValues which, bool owned_only) {
  for (int u = 0; u < params.num_units(); ++u) {
    const UnitShard shard = params.unit(u);
    const float* base = which == ShardValues::kMaster ? shard.master : shard.grad;
    const std::vector<ShardSegment> segments =
        owned_only ? params.owned_segments(u) : std::vector<ShardSegment>(shard.segments.begin(), shard.segments.end());
    for (const ShardSegment& seg : segments) {
      if (which == ShardValues::kGrad && !shard.layout->slots()[seg.slot].trainable) continue;
      float value = 0;
      const std::size_t i = first_nonfinite(params.device(), base + seg.shard_begin, seg.length, &value);
      if (i < seg.length) return NonFiniteAt{u, static_cast<int>(seg.slot), seg.slot_begin + i, value};
    }
  }
  return {};
}

NonFiniteAt lowest_over_ranks(Communicator& comm, const NonFiniteAt& local) {
  // Places as exact doubles: (unit, slot) and the element (below 2^53); the value itself travels as it is.
  const std::vector<double> place =
      all_gather_values(comm, local.found() ? static_cast<double>(local.unit) * 65536.0 + local.slot : -1.0);
  const std::vector<double> element = all_gather_values(comm, static_cast<double>(local.element));
  const std::vector<double> value = all_gather_values(comm, static_cast<double>(local.value));
  NonFiniteAt best;
  for (std::size_t r = 0; r < place.size(); ++r) {
    if (place[r] < 0) continue;
    const NonFiniteAt at{static_cast<int>(place[r] / 65536.0), static_cast<int>(std::fmod(place[r], 65536.0)),
                         static_cast<std::uint64_t>(element[r]), static_cast<float>(value[r])};
    if (!best.found() || std::tie(at.unit, at.slot, at.element) < std::tie(best.unit, best.slot, best.element))
      best = at;
  }
  return best;
}

std::string describe_nonfinite(ShardedParameters& params, const NonFiniteAt& at) {
  if (!at.found()) return "no non-finite value";
  std::string name = "?";
  if (at.unit < params.num_units()) {
    const auto& slots = params.unit(at.unit).layout->slots();
    if (static_cast<std::size_t>(at.slot) < slots.size()) name = slots[static_cast<std::size_t>(at.slot)].name;
  }
  return fmt::format("'{}' (unit {}, slot {}), element {} is {}", name, at.unit, at.slot, at.element,
                     std::isnan(at.value) ? "NaN" : at.value > 0 ? "inf" : "-inf");
}

}  // namespace strata
