// check_finite_weights: the model's elements in equal runs over the ranks, each run read and scanned, the first
// non-finite place agreed over the ranks.
#include "models/gpt/inference/finite_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "runtime/optim/nonfinite.h"

namespace strata::gpt {

void check_finite_weights(const GptConfig& cfg, const WeightReader& read, const std::string& source,
                          Communicator& comm) {
  const std::vector<UnitSpec> units = gpt_units(cfg, 1);
  std::uint64_t total = 0;
  for (const UnitSpec& u : units)
    for (const SlotSpec& s : u.slots) total += shape_numel(s.shape);
  // This rank's run [lo, hi) of the model's elements, in gpt_units' order.
  const std::uint64_t ranks = static_cast<std::uint64_t>(comm.size()), me = static_cast<std::uint64_t>(comm.rank());
  const std::uint64_t lo = total * me / ranks, hi = total * (me + 1) / ranks;
  constexpr std::uint64_t kPiece = std::uint64_t{1} << 22;  // floats read at once: 16 MiB of host memory
  std::vector<float> buf;
  NonFiniteAt bad;
  std::uint64_t at = 0;  // the first element of the slot below, in the model's order
  for (std::size_t u = 0; u < units.size() && !bad.found(); ++u) {
    const std::vector<SlotSpec>& slots = units[u].slots;
    for (std::size_t i = 0; i < slots.size() && !bad.found(); ++i) {
      const std::uint64_t n = shape_numel(slots[i].shape);
      for (std::uint64_t b = std::max(lo, at); b < std::min(hi, at + n) && !bad.found(); b += kPiece) {
        const std::uint64_t count = std::min({kPiece, hi - b, at + n - b});
        buf.resize(count);
        read(slots[i].name, b - at, count, buf.data());
        const auto it = std::find_if(buf.begin(), buf.end(), [](float v) { return !std::isfinite(v); });
        if (it != buf.end())
          bad = NonFiniteAt{static_cast<int>(u), static_cast<int>(i),
                            b - at + static_cast<std::uint64_t>(it - buf.begin()), *it};
      }
      at += n;
    }
  }
  bad = lowest_over_ranks(comm, bad);  // every rank, so all throw the same message
  if (!bad.found()) return;
  const char* what = std::isnan(bad.value) ? "NaN" : bad.value > 0 ? "inf" : "-inf";
  STRATA_THROW(ErrorCode::kNonFinite,
               "{}: tensor '{}' holds {} at element {} (the first non-finite value of the weights); refusing to "
               "decode from weights that are not finite",
               source, units[static_cast<std::size_t>(bad.unit)].slots[static_cast<std::size_t>(bad.slot)].name, what,
               bad.element);
}

}  // namespace strata::gpt
