// check_config_agreement: per-field hashes compared across ranks, then the differing fields' values exchanged.
#include "runtime/bootstrap/config_agreement.h"

#include <mpi.h>

#include <cstdint>

#include "collectives/mpi_util.h"
#include "collectives/rank_values.h"
#include "core/env.h"
#include "core/error.h"

namespace strata {
namespace {

constexpr std::size_t kMaxValueChars = 200;  // bounds what a rank sends for one value

constexpr std::uint64_t kFnvBasis = 14695981039346656037ull;

std::uint64_t fnv1a(const std::string& text, std::uint64_t h) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return (h ^ 0xffu) * 1099511628211ull;  // a terminator, so ("ab","c") and ("a","bc") differ
}


// A value as sent: long ones are cut, keeping their length and hash so that two that differ late still differ.
std::string cut(const std::string& value) {
  if (value.size() <= kMaxValueChars) return value;
  return fmt::format("{}... ({} characters, hash {:016x})", value.substr(0, kMaxValueChars), value.size(),
                     fnv1a(value, kFnvBasis));
}

// "v1 on ranks 0,2; v2 on rank 1" for the distinct texts of `texts` (index = rank), in order of first rank.
std::string values_by_rank(const std::vector<std::string>& texts) {
  std::vector<std::string> distinct;
  std::vector<std::vector<int>> holders;
  for (std::size_t r = 0; r < texts.size(); ++r) {
    std::size_t k = 0;
    while (k < distinct.size() && distinct[k] != texts[r]) ++k;
    if (k == distinct.size()) {
      distinct.push_back(texts[r]);
      holders.emplace_back();
    }
    holders[k].push_back(static_cast<int>(r));
  }
  std::string out;
  for (std::size_t k = 0; k < distinct.size(); ++k)
    out += fmt::format("{}{} on {}", k ? "; " : "", distinct[k].empty() ? "(empty)" : distinct[k],
                       describe_ranks(holders[k]));
  return out;
}

std::string pack(const std::vector<ConfigField>& fields) {
  std::string out;
  for (const ConfigField& f : fields) {
    out += f.name;
    out += '\0';
    out += cut(f.value);
    out += '\0';
  }
  return out;
}

std::vector<ConfigField> unpack(const char* data, std::size_t bytes) {
  std::vector<ConfigField> out;
  std::size_t i = 0;
  auto next = [&] {
    std::size_t end = i;
    while (end < bytes && data[end] != '\0') ++end;
    std::string s(data + i, end - i);
    i = end + 1;
    return s;
  };
  while (i < bytes) {
    ConfigField f;
    f.name = next();
    f.value = i <= bytes ? next() : std::string();
    out.push_back(std::move(f));
  }
  return out;
}

// Every rank's `fields` (values cut), gathered on every rank. Bounded.
std::vector<std::vector<ConfigField>> gather_fields(const std::vector<ConfigField>& fields, int world,
                                                    double timeout_s) {
  std::string mine = pack(fields);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD, &req));
  mpi_wait(req, timeout_s, "configuration agreement: value lengths");
  int total = 0;
  for (int r = 0; r < world; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += lens[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  STRATA_CHECK_MPI(MPI_Iallgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                                   MPI_COMM_WORLD, &req));
  mpi_wait(req, timeout_s, "configuration agreement: values");
  std::vector<std::vector<ConfigField>> out;
  for (int r = 0; r < world; ++r)
    out.push_back(unpack(all.data() + displs[static_cast<std::size_t>(r)],
                         static_cast<std::size_t>(lens[static_cast<std::size_t>(r)])));
  return out;
}

}  // namespace

std::string describe_config_differences(const std::vector<std::vector<ConfigField>>& per_rank) {
  if (per_rank.size() < 2) return {};
  // Different field lists: different programs or versions; name the first position where each list departs.
  std::vector<std::string> lists;
  bool lists_differ = false;
  for (const auto& fields : per_rank) {
    std::string names;
    for (const ConfigField& f : fields) names += f.name + " ";
    lists.push_back(names);
    lists_differ = lists_differ || names != lists.front();
  }
  if (lists_differ) {
    std::vector<std::string> firsts;
    const auto& base = per_rank.front();
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      const auto& fields = per_rank[r];
      std::size_t i = 0;
      while (i < fields.size() && i < base.size() && fields[i].name == base[i].name) ++i;
      bool departs = lists[r] != lists.front() && i < fields.size();
      firsts.push_back(fmt::format("{} settings{}", fields.size(),
                                   departs ? fmt::format(" (setting {} is '{}')", i, fields[i].name) : ""));
    }
    return "configuration differs across ranks: the ranks list different settings (different programs or "
           "versions?): " +
           values_by_rank(firsts);
  }
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < per_rank.front().size(); ++i) {
    std::vector<std::string> texts;
    for (const auto& fields : per_rank) texts.push_back(fields[i].value);
    bool same = true;
    for (const std::string& t : texts) same = same && t == texts.front();
    if (!same) lines.push_back(fmt::format("{}: {}", per_rank.front()[i].name, values_by_rank(texts)));
  }
  if (lines.empty()) return {};
  if (lines.size() == 1) return "configuration differs across ranks: " + lines.front();
  std::string out = fmt::format("configuration differs across ranks in {} settings:", lines.size());
  for (const std::string& l : lines) out += "\n  " + l;
  return out;
}

void check_config_agreement(const std::vector<ConfigField>& given) {
  int initialized = 0;
  STRATA_CHECK_MPI(MPI_Initialized(&initialized));
  STRATA_CHECK(initialized, "check_config_agreement needs MPI: call it after strata::Runtime starts");
  int world = 1, rank = 0;
  STRATA_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  STRATA_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (world == 1) return;
  std::vector<ConfigField> fields = given;
  fields.push_back({"STRATA_VALIDATE", env().validate ? "1" : "0"});
  const double timeout_s = env().timeout_s;

  // One hash of the names, then one per field (name and value).
  std::uint64_t names_hash = fnv1a(std::to_string(fields.size()), kFnvBasis);
  std::vector<std::uint64_t> mine;
  for (const ConfigField& f : fields) {
    names_hash = fnv1a(f.name, names_hash);
    mine.push_back(fnv1a(f.value, fnv1a(f.name, kFnvBasis)));
  }
  std::uint64_t head[2] = {fields.size(), names_hash};
  std::vector<std::uint64_t> heads(2 * static_cast<std::size_t>(world));
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Iallgather(head, 2, MPI_UINT64_T, heads.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD, &req));
  mpi_wait(req, timeout_s, "configuration agreement: field names (are all ranks running the same program?)");
  bool same_names = true;
  for (int r = 1; r < world; ++r) same_names = same_names && heads[2 * r] == heads[0] && heads[2 * r + 1] == heads[1];

  std::vector<ConfigField> differing = fields;  // with different names every field is exchanged
  if (same_names) {
    std::vector<std::uint64_t> all(fields.size() * static_cast<std::size_t>(world));
    int n = static_cast<int>(fields.size());
    STRATA_CHECK_MPI(MPI_Iallgather(mine.data(), n, MPI_UINT64_T, all.data(), n, MPI_UINT64_T, MPI_COMM_WORLD, &req));
    mpi_wait(req, timeout_s, "configuration agreement: field hashes");
    differing.clear();
    for (std::size_t i = 0; i < fields.size(); ++i) {
      bool same = true;
      for (int r = 1; r < world; ++r) same = same && all[r * fields.size() + i] == all[i];
      if (!same) differing.push_back(fields[i]);
    }
    if (differing.empty()) return;
  }
  std::string message = describe_config_differences(gather_fields(differing, world, timeout_s));
  STRATA_CHECK_CODE(ErrorCode::kMismatch, message.empty(), "{}", message);
}

}  // namespace strata
