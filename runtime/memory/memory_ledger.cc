// MemoryLedger: gathering the per-rank MemoryStats and printing them.
#include "runtime/memory/memory_ledger.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/byte_units.h"

namespace strata {

LedgerRow MemoryLedger::local(const Device& device, int rank) {
  const MemoryStats& stats = device.memory_stats();
  LedgerRow row;
  row.rank = rank;
  for (std::size_t i = 0; i < kNumMemCategories; ++i) {
    auto c = static_cast<MemCategory>(i);
    row.current[i] = static_cast<std::int64_t>(stats.current(c));
    row.peak[i] = static_cast<std::int64_t>(stats.peak(c));
  }
  row.current_total = static_cast<std::int64_t>(stats.current_total());
  row.peak_total = static_cast<std::int64_t>(stats.peak_total());
  return row;
}

std::vector<LedgerRow> MemoryLedger::gather(const Device& device, Communicator& comm) {
  constexpr std::size_t kFields = 2 * kNumMemCategories + 2;
  LedgerRow me = local(device, comm.rank());
  std::vector<std::int64_t> mine(kFields), all(kFields * static_cast<std::size_t>(comm.size()));
  for (std::size_t i = 0; i < kNumMemCategories; ++i) {
    mine[i] = me.current[i];
    mine[kNumMemCategories + i] = me.peak[i];
  }
  mine[2 * kNumMemCategories] = me.current_total;
  mine[2 * kNumMemCategories + 1] = me.peak_total;
  // Through the communicator's device (the ledger may be another device's, e.g. the offload host's), in its memory
  // (device memory for NCCL), with the few bytes copied in and out.
  Device& dev = comm.device();
  Buffer send = dev.allocate(kFields * 8, MemCategory::kWorkspace);
  Buffer recv = dev.allocate(all.size() * 8, MemCategory::kWorkspace);
  dev.copy_from_host(send.data(), mine.data(), kFields * 8);
  auto stream = dev.create_stream("ledger");
  comm.all_gather(send.data(), recv.data(), kFields, DType::kI64, *stream);
  stream->synchronize();
  dev.copy_to_host(all.data(), recv.data(), all.size() * 8);
  std::vector<LedgerRow> rows(static_cast<std::size_t>(comm.size()));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::int64_t* f = all.data() + r * kFields;
    rows[r].rank = static_cast<int>(r);
    for (std::size_t i = 0; i < kNumMemCategories; ++i) {
      rows[r].current[i] = f[i];
      rows[r].peak[i] = f[kNumMemCategories + i];
    }
    rows[r].current_total = f[2 * kNumMemCategories];
    rows[r].peak_total = f[2 * kNumMemCategories + 1];
  }
  return rows;
}

std::string MemoryLedger::table(const std::vector<LedgerRow>& rows) {
  std::string out = fmt::format("{:>4}  {:<18} {:>12} {:>12} {:>14} {:>14}\n", "rank", "category", "current_MiB",
                                "peak_MiB", "current_bytes", "peak_bytes");
  for (const LedgerRow& r : rows) {
    for (std::size_t i = 0; i < kNumMemCategories; ++i) {
      if (r.current[i] == 0 && r.peak[i] == 0) continue;
      out += fmt::format("{:>4}  {:<18} {:>12.3f} {:>12.3f} {:>14} {:>14}\n", r.rank,
                         mem_category_name(static_cast<MemCategory>(i)), mib(r.current[i]), mib(r.peak[i]),
                         r.current[i], r.peak[i]);
    }
    out += fmt::format("{:>4}  {:<18} {:>12.3f} {:>12.3f} {:>14} {:>14}\n", r.rank, "total", mib(r.current_total),
                       mib(r.peak_total), r.current_total, r.peak_total);
  }
  return out;
}

std::string MemoryLedger::json(const std::vector<LedgerRow>& rows) {
  nlohmann::json doc;
  doc["ranks"] = nlohmann::json::array();
  for (const LedgerRow& r : rows) {
    nlohmann::json cur, peak;
    for (std::size_t i = 0; i < kNumMemCategories; ++i) {
      const char* name = mem_category_name(static_cast<MemCategory>(i));
      cur[name] = r.current[i];
      peak[name] = r.peak[i];
    }
    doc["ranks"].push_back({{"rank", r.rank},
                            {"current", cur},
                            {"peak", peak},
                            {"current_total", r.current_total},
                            {"peak_total", r.peak_total}});
  }
  return doc.dump();
}

}  // namespace strata
