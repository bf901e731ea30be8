// probe_storage: probe files in the directory, listed by every rank.
#include "runtime/checkpoint/storage_view.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

#include "collectives/rank_values.h"
#include "runtime/checkpoint/chunk_file.h"
#include "core/error.h"

namespace strata {
namespace fs = std::filesystem;

bool StorageView::shared() const { return groups() == 1; }

int StorageView::groups() const {
  int n = 0;
  for (std::size_t r = 0; r < leader_of.size(); ++r) n += leads(static_cast<int>(r)) ? 1 : 0;
  return n;
}

std::string StorageView::describe() const {
  if (shared()) return "every rank sees the same files";
  std::string out = fmt::format("{} groups of ranks see files of their own:", groups());
  for (std::size_t l = 0; l < leader_of.size(); ++l) {
    if (!leads(static_cast<int>(l))) continue;
    std::vector<int> members;
    for (std::size_t r = 0; r < leader_of.size(); ++r)
      if (leader_of[r] == static_cast<int>(l)) members.push_back(static_cast<int>(r));
    out += (l == 0 ? " " : "; ") + describe_ranks(members);
  }
  return out;
}

StorageView probe_storage(Communicator& world, const std::string& dir) {
  const std::string token = broadcast_text(
      world,
      world.rank() == 0 ? fmt::format("{}-{}", ::getpid(), std::chrono::steady_clock::now().time_since_epoch().count())
                        : std::string(),
      0);
  const std::string prefix = ".storage-probe-" + token + "-";
  const std::string mine = dir + "/" + prefix + std::to_string(world.rank());
  std::string error;
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    STRATA_CHECK_CODE(ErrorCode::kIo, !ec || fs::is_directory(dir), "cannot create {}: {}", dir, ec.message());
    write_file_atomically(mine, std::to_string(world.rank()) + "\n");
  } catch (const std::exception& e) {
    error = e.what();
  }
  all_agree(world, error.empty(), error, fmt::format("probing which ranks see the files of {}", dir));
  // Every probe is written: the lowest rank whose probe this rank sees is its leader.
  int leader = world.rank();
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rank = name.substr(prefix.size());
    if (!rank.empty() && rank.find_first_not_of("0123456789") == std::string::npos && rank.size() < 9)
      leader = std::min(leader, std::stoi(rank));
  }
  const std::vector<double> leaders = all_gather_values(world, static_cast<double>(leader));  // all have listed
  fs::remove(mine, ec);
  StorageView view;
  for (double l : leaders) view.leader_of.push_back(static_cast<int>(l));
  return view;
}

}  // namespace strata
