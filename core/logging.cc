// Logger set-up: one pattern carrying the rank, levels from STRATA_LOG_LEVEL, quiet unlisted ranks.
#include "core/logging.h"

#include <spdlog/cfg/helpers.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>
#include <sstream>

#include "core/env.h"

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

void init_logging(int rank, int world_size, const Env& env) {
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
