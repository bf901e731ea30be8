// Logger set-up: one pattern carrying the rank, levels from STRATA_LOG_LEVEL, quiet unlisted ranks.
#include "core/logging.h"

#include <spdlog/cfg/helpers.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <sstream>

#include "core/env.h"
#include "core/error.h"

namespace strata {
namespace {

std::mutex g_mutex;
bool g_configured = false;
bool g_quiet = false;  // this rank is not in STRATA_LOG_RANKS: warnings and errors only
std::string g_pattern = "[%H:%M:%S.%e] [rank ?] [%n] [%^%l%$] %v";

void apply_quiet(spdlog::logger& l) {
  if (g_quiet && l.level() < spdlog::level::warn) l.set_level(spdlog::level::warn);
}

}  // namespace

bool rank_is_listed(const std::string& spec, int rank) {
  if (spec == "all" || spec == "*") return true;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty() && item == std::to_string(rank)) return true;
  }
  return false;
}

const std::vector<std::string>& logger_names() {
  static const std::vector<std::string> names{"core", "comm", "shard", "mem", "optim", "mesh", "ckpt", "gpt"};
  return names;
}

void check_log_levels(const std::string& spec, const char* what) {
  static const char* const kLevels[] = {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"};
  auto is_level = [](std::string level) {
    for (auto& c : level) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return std::find(std::begin(kLevels), std::end(kLevels), level) != std::end(kLevels);
  };
  const std::string allowed = fmt::format(
      "a level (trace, debug, info, warn, error, critical or off), optionally followed by per-logger levels "
      "name=level with the names {}, e.g. info,comm=debug",
      fmt::join(logger_names(), ", "));
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, !spec.empty(), "{} is empty: it must be {}", what, allowed);
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) {
      STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, is_level(item), "{}='{}': '{}' is not a level; {} must be {}",
                        what, spec, item, what, allowed);
      continue;
    }
    const std::string name = item.substr(0, eq), level = item.substr(eq + 1);
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                      std::find(logger_names().begin(), logger_names().end(), name) != logger_names().end(),
                      "{}='{}': there is no logger '{}'; {} must be {}", what, spec, name, what, allowed);
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, is_level(level), "{}='{}': '{}' is not a level; {} must be {}",
                      what, spec, level, what, allowed);
  }
}

void check_log_ranks(const std::string& spec, const char* what, int world_size) {
  if (spec == "all" || spec == "*") return;
  std::stringstream ss(spec);
  std::string item;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    // Items are compared with std::to_string(rank): a plain decimal number without sign or leading zeros.
    const bool number = !item.empty() && item.size() <= 9 &&
                        item.find_first_not_of("0123456789") == std::string::npos && (item == "0" || item[0] != '0');
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, number,
                      "{}='{}': '{}' is not a rank; {} must be all, * or a comma list of rank numbers, e.g. 0 or 0,3",
                      what, spec, item, what);
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, world_size < 0 || std::stoi(item) < world_size,
                      "{}='{}' names rank {}, which this job of {} rank{} does not have (ranks 0 to {})", what, spec,
                      item, world_size, world_size == 1 ? "" : "s", world_size - 1);
    any = true;
  }
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, any,
                    "{}='{}' lists no rank; it must be all, * or a comma list of rank numbers, e.g. 0 or 0,3", what,
                    spec);
}

void init_logging(int rank, int world_size, const Env& env) {
  check_log_levels(env.log_level, "STRATA_LOG_LEVEL");
  check_log_ranks(env.log_ranks, "STRATA_LOG_RANKS", world_size);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pattern = fmt::format("[%H:%M:%S.%e] [rank {}/{}] [%n] [%^%l%$] %v", rank, world_size);
  g_quiet = !rank_is_listed(env.log_ranks, rank);
  spdlog::set_pattern(g_pattern);
  spdlog::cfg::helpers::load_levels(env.log_level);
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { apply_quiet(*l); });
  g_configured = true;
}

spdlog::logger& logger(const std::string& subsystem) {
  if (auto existing = spdlog::get(subsystem)) return *existing;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto existing = spdlog::get(subsystem)) return *existing;
  auto created = spdlog::stderr_color_mt(subsystem);  // registers, takes the registry's pattern and level
  if (!g_configured) created->set_pattern(g_pattern);
  apply_quiet(*created);
  return *created;
}

}  // namespace strata
