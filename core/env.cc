// Reads every STRATA_* variable (the only getenv of STRATA_* in the project).
#include "core/env.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "core/logging.h"

namespace strata {
namespace {

std::mutex g_env_mutex;
Env* g_env = nullptr;

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

bool parse_bool(const char* text, const char* what) {
  std::string s(text);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  STRATA_THROW(ErrorCode::kInvalidArgument, "{}='{}' is not a boolean (use 0 or 1)", what, text);
}

}  // namespace

double parse_seconds(const std::string& text, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // Finite and at most kMaxSeconds: "inf", "nan" or 1e300 would make every deadline overflow into "already past".
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                    !text.empty() && end != text.c_str() && *end == '\0' && std::isfinite(v) && v > 0 &&
                        v <= kMaxSeconds,
                    "{}='{}' must be a number of seconds > 0 and <= {:g} (about 115 days)", what, text, kMaxSeconds);
  return v;
}

std::size_t parse_bytes(const std::string& text, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, !text.empty() && end != text.c_str() && std::isfinite(v) && v >= 0,
                    "{}='{}' must be a finite size in bytes >= 0 with an optional unit K, M, G or T (e.g. 80GB)",
                    what, text);
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else STRATA_THROW(ErrorCode::kInvalidArgument, "{}='{}': unknown unit '{}' (use K, M, G or T)", what, text, end);
  // 2^64 is exactly representable: a product at or above it does not fit std::size_t (the cast would be undefined).
  const double bytes = v * mult;
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, bytes < 18446744073709551616.0,
                    "{}='{}' is {:g} bytes, more than a 64-bit size can hold", what, text, bytes);
  return static_cast<std::size_t>(bytes);
}

std::size_t parse_memory_budget(const std::string& text, const char* what) {
  const std::size_t bytes = parse_bytes(text, what);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, bytes > 0,
                    "{}='{}' is a budget of 0 bytes, which nothing fits in; leave it unset for no budget", what, text);
  return bytes;
}

Env Env::from_environment() {
  Env e;
  if (const char* v = get("STRATA_BACKEND")) {
    e.backend = v;
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, e.backend == "auto" || e.backend == "cpu" || e.backend == "cuda",
                      "STRATA_BACKEND='{}' must be auto, cpu or cuda", v);
  }
  if (const char* v = get("STRATA_COMM")) {
    e.comm = v;
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                      e.comm == "auto" || e.comm == "nccl" || e.comm == "mpi" || e.comm == "mpi-staged",
                      "STRATA_COMM='{}' must be auto, nccl, mpi or mpi-staged", v);
  }
  if (const char* v = get("STRATA_TIMEOUT_S")) e.timeout_s = parse_seconds(v, "STRATA_TIMEOUT_S");
  if (const char* v = get("STRATA_VALIDATE")) e.validate = parse_bool(v, "STRATA_VALIDATE");
  if (const char* v = get("STRATA_SHM")) e.shm = parse_bool(v, "STRATA_SHM");
  if (const char* v = get("STRATA_SHM_IN_PLACE")) e.shm_in_place = parse_bool(v, "STRATA_SHM_IN_PLACE");
  if (const char* v = get("STRATA_LOG_LEVEL")) {
    e.log_level = v;
    check_log_levels(e.log_level, "STRATA_LOG_LEVEL");
  }
  if (const char* v = get("STRATA_LOG_RANKS")) {
    e.log_ranks = v;
    check_log_ranks(e.log_ranks, "STRATA_LOG_RANKS");
  }
  if (const char* v = get("STRATA_TRACE")) e.trace_file = v;
  if (const char* v = get("STRATA_DEVICE_MEMORY")) e.device_memory = parse_memory_budget(v, "STRATA_DEVICE_MEMORY");
  if (const char* v = get("STRATA_RANKS_PER_NODE")) {
    const std::string t = v;
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                      !t.empty() && t.size() <= 6 && t.find_first_not_of("0123456789") == std::string::npos &&
                          std::stoi(t) >= 1,
                      "STRATA_RANKS_PER_NODE='{}' must be a whole number of ranks, at least 1", v);
    e.ranks_per_node = std::stoi(t);
  }
  if (const char* v = get("STRATA_FAULT")) {
    e.fault = v;
    const std::size_t colon = e.fault.find(':');
    const std::string kind = e.fault.substr(0, colon);
    // RANK and NTH are plain numbers (NTH >= 1): "checkpoint-kill:x" would otherwise inject nothing, silently.
    const std::string args = colon == std::string::npos ? std::string() : e.fault.substr(colon + 1);
    const std::size_t second = args.find(':');
    auto number = [](const std::string& t) {
      return !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
    };
    const bool args_ok = second == std::string::npos
                             ? number(args)
                             : number(args.substr(0, second)) && number(args.substr(second + 1)) &&
                                   std::stoi(args.substr(second + 1)) >= 1;
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument,
                      ((kind == "checkpoint-kill" || kind == "checkpoint-enospc") && args_ok) ||
                          (kind == "pp-no-send" && second == std::string::npos && number(args)),
                      "STRATA_FAULT='{}' must be checkpoint-kill:RANK[:NTH], checkpoint-enospc:RANK[:NTH] or "
                      "pp-no-send:PP_RANK (RANK a rank number, NTH >= 1)",
                      v);
    e.fault_rank = std::stoi(args.substr(0, second));
    if (kind == "pp-no-send") e.fault_pp_no_send = e.fault_rank;
  }
  return e;
}

std::string Env::describe() const {
  return fmt::format(
      "STRATA_BACKEND={} STRATA_COMM={} STRATA_TIMEOUT_S={} STRATA_VALIDATE={} STRATA_SHM={} STRATA_SHM_IN_PLACE={} STRATA_LOG_LEVEL={} "
      "STRATA_LOG_RANKS={} STRATA_TRACE={} STRATA_DEVICE_MEMORY={}{}{}",
      backend, comm, timeout_s, validate ? 1 : 0, shm ? 1 : 0, shm_in_place ? 1 : 0, log_level, log_ranks,
      trace_file.empty() ? "(off)" : trace_file,
      device_memory == 0 ? std::string("(unlimited)") : std::to_string(device_memory),
      ranks_per_node == 0 ? std::string() : fmt::format(" STRATA_RANKS_PER_NODE={}", ranks_per_node),
      fault.empty() ? std::string() : " STRATA_FAULT=" + fault);
}

const Env& env() {
  std::lock_guard<std::mutex> lock(g_env_mutex);
  if (!g_env) g_env = new Env(Env::from_environment());
  return *g_env;
}

void set_env(const Env& e) {
  std::lock_guard<std::mutex> lock(g_env_mutex);
  if (!g_env) g_env = new Env(e);
  else *g_env = e;
}

}  // namespace strata
