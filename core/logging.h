// Per-subsystem spdlog loggers ("core", "comm", "shard", "mem", "optim", ...) with the rank in every line.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace strata {

struct Env;

// Configures every logger from STRATA_LOG_LEVEL and STRATA_LOG_RANKS for this rank. Idempotent.
void init_logging(int rank, int world_size, const Env& env);

// The logger of a subsystem, created on first use with the configured pattern and level.
spdlog::logger& logger(const std::string& subsystem);

// True when `rank` is listed in a STRATA_LOG_RANKS value ("all", "0", "0,3").
bool rank_is_listed(const std::string& ranks_spec, int rank);

}  // namespace strata
