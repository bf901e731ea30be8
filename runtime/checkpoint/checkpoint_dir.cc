// CheckpointDir: names, committed steps, latest, pruning.
#include "runtime/checkpoint/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/logging.h"
#include "runtime/checkpoint/chunk_file.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "step-";
constexpr const char* kTmpSuffix = ".tmp";

// The step of "step-00000010" (and, with `tmp`, of "step-00000010.tmp"); -1 for any other name.
std::int64_t step_of(const std::string& name, bool tmp) {
  std::string digits = name;
  if (digits.rfind(kPrefix, 0) != 0) return -1;
  digits = digits.substr(std::char_traits<char>::length(kPrefix));
  const std::size_t suffix = std::char_traits<char>::length(kTmpSuffix);
  if (tmp) {
    if (digits.size() <= suffix || digits.compare(digits.size() - suffix, suffix, kTmpSuffix) != 0) return -1;
    digits.resize(digits.size() - suffix);
  }
  if (digits.empty() || digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

}  // namespace

std::string CheckpointDir::step_name(std::int64_t step) { return fmt::format("{}{:08d}", kPrefix, step); }
std::string CheckpointDir::step_path(std::int64_t step) const { return path_ + "/" + step_name(step); }
std::string CheckpointDir::tmp_path(std::int64_t step) const { return step_path(step) + kTmpSuffix; }
std::string CheckpointDir::rank_file(int rank) { return fmt::format("rank-{:05d}.bin", rank); }
std::int64_t CheckpointDir::parse_step_name(const std::string& name, bool tmp) { return step_of(name, tmp); }

std::vector<std::int64_t> CheckpointDir::committed_steps() const {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    const std::int64_t step = step_of(e.path().filename().string(), false);
    if (step < 0 || !e.is_directory(ec)) continue;
    if (fs::exists(e.path() / "COMMITTED", ec) && fs::exists(e.path() / "index.json", ec)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::int64_t> CheckpointDir::incomplete_steps() const {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    const std::int64_t step = step_of(e.path().filename().string(), true);
    if (step >= 0 && e.is_directory(ec)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string CheckpointDir::latest_name() const {
  std::error_code ec;
  if (!fs::exists(path_ + "/latest", ec)) return {};
  std::string name = read_input_file(path_ + "/latest", "the latest marker", 4096);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

std::int64_t CheckpointDir::latest_step() const {
  const std::vector<std::int64_t> steps = committed_steps();
  const std::int64_t step = step_of(latest_name(), false);
  if (step >= 0 && std::binary_search(steps.begin(), steps.end(), step)) return step;
  return steps.empty() ? -1 : steps.back();
}

bool CheckpointDir::holds_checkpoints() const {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "latest" || step_of(name, false) >= 0 || step_of(name, true) >= 0) return true;
  }
  return false;
}

ResumePlan CheckpointDir::resume_plan() const {
  ResumePlan plan;
  const std::vector<std::int64_t> committed = committed_steps();
  std::vector<std::int64_t> uncommitted;  // final names without COMMITTED or index.json
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    const std::int64_t step = step_of(e.path().filename().string(), false);
    if (step >= 0 && e.is_directory(ec) && !std::binary_search(committed.begin(), committed.end(), step))
      uncommitted.push_back(step);
  }
  std::sort(uncommitted.begin(), uncommitted.end());
  const std::vector<std::int64_t> interrupted = incomplete_steps();
  const std::string latest = latest_name();
  plan.step = latest_step();
  const std::string loads = plan.step >= 0 ? fmt::format("resuming from {}", step_name(plan.step))
                                           : std::string("nothing is committed");
  if (plan.step < 0 && (!uncommitted.empty() || !latest.empty())) {
    plan.refusal = fmt::format(
        "{} holds no committed checkpoint, yet {}: there is nothing to resume, and starting from step 0 would "
        "silently replace that run. Remove them (or choose another --checkpoint-dir) to start fresh",
        path_, !uncommitted.empty() ? fmt::format("{} has no COMMITTED marker or no index.json (damaged, or never "
                                                  "finished)", step_name(uncommitted.back()))
                                    : fmt::format("its latest names '{}'", latest));
    return plan;
  }
  const std::int64_t latest_step_named = step_of(latest, false);
  if (!latest.empty() && latest_step_named != plan.step)
    plan.notes.push_back(fmt::format(
        "{}/latest names '{}', which is not a committed checkpoint{}: {}, the newest committed one; the steps after "
        "it are trained again",
        path_, latest,
        std::binary_search(uncommitted.begin(), uncommitted.end(), latest_step_named)
            ? " (its directory has no COMMITTED marker or no index.json: damaged)"
            : "",
        loads));
  for (std::int64_t s : uncommitted)
    if (s > plan.step && s != latest_step_named)
      plan.notes.push_back(fmt::format("{} is newer than the checkpoint loaded but not committed (no COMMITTED marker "
                                       "or no index.json): passed over; {}",
                                       step_path(s), loads));
  for (std::int64_t s : committed)
    if (s > plan.step)
      plan.notes.push_back(fmt::format("{} is committed and newer than {}, which latest names (a job stopped between "
                                       "that commit and the update of latest): {} as latest says; the steps after it "
                                       "are trained again",
                                       step_path(s), step_name(plan.step), loads));
  for (std::int64_t s : interrupted)
    if (s > plan.step)
      plan.notes.push_back(fmt::format("{} is a save that was interrupted (a job stopped while writing it): not "
                                       "loaded; {}",
                                       tmp_path(s), plan.step >= 0 ? loads : std::string("starting from step 0")));
  return plan;
}

CheckpointIndex CheckpointDir::read_index(std::int64_t step) const {
  const std::string dir = step_path(step);
  std::error_code ec;
  STRATA_CHECK_CODE(ErrorCode::kIo, fs::exists(dir + "/COMMITTED", ec),
                    "{} is not a committed checkpoint (no COMMITTED marker)", dir);
  const std::string where = dir + "/index.json";
  CheckpointIndex index = CheckpointIndex::parse(read_text_file(where), where);
  STRATA_CHECK_CODE(ErrorCode::kIo, index.step == step, "{} says step {}, its directory step {}", where, index.step,
                    step);
  return index;
}

void CheckpointDir::create() const {
  std::error_code ec;
  fs::create_directories(path_, ec);
  STRATA_CHECK_CODE(ErrorCode::kIo, !ec && fs::is_directory(path_), "cannot create checkpoint directory {}: {}", path_,
                    ec ? ec.message() : "not a directory");
}

void CheckpointDir::commit(const CheckpointIndex& index) const {
  const std::string tmp = tmp_path(index.step), final_dir = step_path(index.step);
  write_file_atomically(tmp + "/index.json", index.serialize());
  write_file_atomically(tmp + "/COMMITTED", fmt::format("step {}\n", index.step));
  fsync_directory(tmp);
  std::error_code ec;
  fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier run
  fs::rename(tmp, final_dir, ec);
  STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "cannot rename {} to {}: {}", tmp, final_dir, ec.message());
  fsync_directory(path_);
  write_file_atomically(path_ + "/latest", step_name(index.step) + "\n");
}

void CheckpointDir::prune(int keep, std::int64_t newest) const {
  std::error_code ec;
  std::vector<std::int64_t> steps = committed_steps();
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    // A save that never finished (NAME.tmp), and a step directory under its final name that is not committed (no
    // COMMITTED marker or no index.json: damaged, or a removal that stopped half-way): neither is ever loaded.
    const std::int64_t tmp_step = step_of(name, true), final_step = step_of(name, false);
    const bool abandoned =
        (tmp_step >= 0 && tmp_step < newest) || (final_step >= 0 && final_step < newest && e.is_directory(ec) &&
                                                 !std::binary_search(steps.begin(), steps.end(), final_step));
    if (abandoned) {
      fs::remove_all(e.path(), ec);
      if (ec) logger("ckpt").warn("could not remove the abandoned {}: {}", e.path().string(), ec.message());
    }
  }
  const std::size_t kept = static_cast<std::size_t>(std::max(keep, 1));
  for (std::size_t i = 0; i + kept < steps.size(); ++i) {
    if (steps[i] >= newest) break;
    // The marker goes first: a removal that stops half-way leaves a directory that is no longer a checkpoint.
    const std::string dir = step_path(steps[i]);
    fs::remove(dir + "/COMMITTED", ec);
    fs::remove_all(dir, ec);
    if (ec) logger("ckpt").warn("could not remove the old checkpoint {}: {}", dir, ec.message());
  }
}

}  // namespace strata
