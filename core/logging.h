// Per-subsystem spdlog loggers ("core", "comm", "shard", "mem", "optim", ...) with the rank in every line.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

namespace strata {

struct Env;

// Configures every logger from STRATA_LOG_LEVEL and STRATA_LOG_RANKS for this rank. Idempotent.
void init_logging(int rank, int world_size, const Env& env);

// The logger of a subsystem, created on first use with the configured pattern and level.
spdlog::logger& logger(const std::string& subsystem);

// True when `rank` is listed in a STRATA_LOG_RANKS value ("all", "0", "0,3").
bool rank_is_listed(const std::string& ranks_spec, int rank);

// The subsystem loggers a STRATA_LOG_LEVEL spec may name ("comm=debug"): core, comm, shard, mem, optim, mesh, ckpt,
// gpt. A logger added with logger("x") is added here too, or STRATA_LOG_LEVEL=x=debug is refused.
const std::vector<std::string>& logger_names();
// kInvalidArgument naming `what` (the variable) and listing what is allowed, unless `spec` is a level (trace, debug,
// info, warn, error, critical, off; spdlog's "warning" and "err" too) or a comma list of a level and name=level
// items with names from logger_names(), e.g. "info,comm=debug".
void check_log_levels(const std::string& spec, const char* what);
// kInvalidArgument as above unless `spec` is "all", "*" or a comma list of rank numbers ("0", "0,3").
void check_log_ranks(const std::string& spec, const char* what, int world_size = -1);

}  // namespace strata
