// MemoryLedger: every rank's current and peak bytes per MemCategory, gathered into one table or JSON document.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/memory_stats.h"

namespace strata {

struct LedgerRow {
  int rank = 0;
  std::array<std::int64_t, kNumMemCategories> current{};
  std::array<std::int64_t, kNumMemCategories> peak{};
  std::int64_t current_total = 0;
  std::int64_t peak_total = 0;
};

class MemoryLedger {
 public:
  // This rank's figures.
  static LedgerRow local(const Device& device, int rank);
  // Collective over `comm`: every rank's row of `device`'s ledger, in rank order (on every rank). The exchange runs
  // on comm's device, so `device` may be another one (the offload host memory).
  static std::vector<LedgerRow> gather(const Device& device, Communicator& comm);
  // Fixed-column table: one row per rank and category with current and peak MiB (and bytes).
  static std::string table(const std::vector<LedgerRow>& rows);
  // {"ranks": [{"rank": 0, "current": {"param_shard": bytes, ...}, "peak": {...}, "current_total": ..}, ...]}
  static std::string json(const std::vector<LedgerRow>& rows);
};

}  // namespace strata
