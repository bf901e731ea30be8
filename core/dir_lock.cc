// DirLock: DIR/.lock held with flock(2), its JSON record of the holder, liveness by pid and start time, take-over.
#include "core/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/json_schema.h"

namespace strata {

struct DirLock::State {
  std::string path;
  int fd = -1;
  ~State() {
    // Empty record first, then the unlock: a job that finds the lock free finds no record of a live holder.
    if (::ftruncate(fd, 0) == 0) (void)::fsync(fd);
    ::close(fd);
  }
};

namespace {

constexpr std::size_t kMaxRecordBytes = 4096;

std::mutex g_mutex;
std::map<std::string, std::weak_ptr<DirLock::State>>& live_locks() {
  static auto* m = new std::map<std::string, std::weak_ptr<DirLock::State>>();
  return *m;
}

std::string host_name() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

// The start of process `pid` in clock ticks after boot (field 22 of /proc/PID/stat); 0 when it cannot be read.
// A small file of /proc (whose size stat() reports as 0: read to its end), "" when it cannot be read.
std::string read_proc_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buf[1024];
  for (ssize_t n; text.size() < kMaxRecordBytes && (n = ::read(fd, buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return text;
}

std::uint64_t start_ticks_of(std::int64_t pid) {
  const std::string stat = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  // "PID (COMM) S PPID ...": COMM may hold spaces and parentheses, so fields are counted after its last ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

std::string record_json(const LockHolder& h) {
  return nlohmann::json{{"host", h.host},
                        {"pid", h.pid},
                        {"start_ticks", h.start_ticks},
                        {"started", h.started},
                        {"program", h.program}}
             .dump() +
         "\n";
}

const JsonSchema& record_schema() {
  static const JsonSchema s =
      JsonSchema::object({required("host", JsonSchema::string(256)), required("pid", JsonSchema::integer(1, INT32_MAX)),
                          required("start_ticks", JsonSchema::integer(0, UINT64_MAX)),
                          required("started", JsonSchema::string(64)), required("program", JsonSchema::string(256))});
  return s;
}

// The record in `fd`: false with `problem` set when it is not one (empty: "").
bool read_record(int fd, const std::string& path, LockHolder& h, std::string& problem) {
  char buf[kMaxRecordBytes + 1];
  const ssize_t n = ::pread(fd, buf, kMaxRecordBytes, 0);
  if (n <= 0) {
    problem = n < 0 ? std::string("cannot read it: ") + std::strerror(errno) : "";
    return false;
  }
  try {
    const nlohmann::json j = parse_json(std::string(buf, static_cast<std::size_t>(n)), "lock " + path, ErrorCode::kIo);
    record_schema().check(j, "lock " + path, ErrorCode::kIo);
    h.host = j["host"];
    h.pid = j["pid"];
    h.start_ticks = j["start_ticks"];
    h.started = j["started"];
    h.program = j["program"];
    return true;
  } catch (const Error& e) {
    problem = e.what();
    return false;
  }
}

// "in use by <holder>", with what to do about it; `other_host`: the holder cannot be probed from here.
[[noreturn]] void refuse(const std::string& what, const std::string& dir, const std::string& path,
                         const std::string& holder, bool other_host) {
  if (other_host)
    STRATA_THROW(ErrorCode::kIo,
                 "{} '{}' is locked by {}, on another host: from here it cannot be told whether that job still runs. "
                 "If it does not, remove {} and start again; if it does, use another directory",
                 what, dir, holder, path);
  STRATA_THROW(ErrorCode::kIo,
               "{} '{}' is in use by another job: {} holds {}. Two jobs in one directory would replace and prune each "
               "other's files: wait for it to end, or use another directory",
               what, dir, holder, path);
}

}  // namespace

std::string LockHolder::describe() const {
  return fmt::format("{} (pid {} on host {}, started {})", program.empty() ? "a program" : program, pid, host,
                     started.empty() ? "at an unknown time" : started);
}

LockHolder this_process(const std::string& program) {
  LockHolder h;
  h.host = host_name();
  h.pid = ::getpid();
  h.start_ticks = start_ticks_of(h.pid);
  h.started = utc_now();
  h.program = program;
  if (h.program.empty()) {  // this process's name, as the kernel has it
    h.program = read_proc_file("/proc/self/comm");
    while (!h.program.empty() && (h.program.back() == '\n' || h.program.back() == ' ')) h.program.pop_back();
  }
  return h;
}

bool holder_alive(const LockHolder& holder, bool& unknown) {
  unknown = holder.host != host_name();
  if (unknown) return false;
  if (holder.pid <= 0 || holder.pid > INT32_MAX) return false;
  if (::kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH) return false;
  // The pid exists (or belongs to another user: EPERM); it is the holder only if it started when the holder did.
  const std::uint64_t ticks = start_ticks_of(holder.pid);
  return ticks == 0 || holder.start_ticks == 0 || ticks == holder.start_ticks;
}

DirLock DirLock::acquire(const std::string& dir, const std::string& what, const std::string& program) {
  char resolved[PATH_MAX];
  STRATA_CHECK_CODE(ErrorCode::kIo, ::realpath(dir.c_str(), resolved) != nullptr, "{} '{}': cannot resolve it: {}",
                    what, dir, std::strerror(errno));
  const std::string path = std::string(resolved) + "/.lock";
  std::lock_guard<std::mutex> guard(g_mutex);
  DirLock lock;
  if (auto shared = live_locks()[path].lock()) {  // this process holds it already (a saver and a loader, say)
    lock.state_ = shared;
    return lock;
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd >= 0, "{} '{}': cannot open its lock {}: {}", what, dir, path,
                    std::strerror(errno));
  // Until the lock is ours, closing the descriptor is all there is to undo (it also drops a flock we took).
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  struct stat st {};
  STRATA_CHECK_CODE(ErrorCode::kIo, ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode),
                    "{} '{}': its lock {} is a {}, not a regular file", what, dir, path, file_type_name(st.st_mode));
  LockHolder holder;
  std::string problem;
  bool locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  const int err = locked ? 0 : errno;
  if (err == EWOULDBLOCK) {
    // Held, so by a live process (the kernel drops a dead one's lock). Its record may be a moment from written.
    bool have = false;
    for (int i = 0; i < 20 && !(have = read_record(fd, path, holder, problem)); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    refuse(
        what, dir, path,
        have ? holder.describe()
             : "a live process (its record cannot be read: " + (problem.empty() ? std::string("empty") : problem) + ")",
        false);
  }
  // A file system without flock (ENOLCK, EOPNOTSUPP): the record alone decides, by probing the holder.
  STRATA_CHECK_CODE(ErrorCode::kIo, locked || err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS,
                    "{} '{}': cannot lock {}: {}", what, dir, path, std::strerror(err));
  if (read_record(fd, path, holder, problem)) {
    bool unknown = false;
    const bool alive = holder_alive(holder, unknown);
    // On another host the holder's flock may not reach this one (network file systems differ): refused. Here, a free
    // lock is the truth: its process is gone, or exiting (a pid lingers until it is reaped), or the directory is a
    // copy of one in use; only without flock does a live pid stop us.
    if (unknown || (alive && !locked)) refuse(what, dir, path, holder.describe(), unknown);
    lock.takeover_ =
        fmt::format("{} '{}': took over the lock {} of {}: {}", what, dir, path,
                    alive ? "a job that no longer holds it (exiting, or this directory is a copy of one in use)"
                          : "a job that is gone",
                    holder.describe());
  } else if (!problem.empty()) {
    lock.takeover_ = fmt::format("{} '{}': replaced the unreadable lock record {} ({})", what, dir, path, problem);
  }
  const std::string record = record_json(this_process(program));
  const bool written = ::ftruncate(fd, 0) == 0 &&
                       ::pwrite(fd, record.data(), record.size(), 0) == static_cast<ssize_t>(record.size()) &&
                       ::fsync(fd) == 0;
  STRATA_CHECK_CODE(ErrorCode::kIo, written, "{} '{}': cannot write its lock {}: {}", what, dir, path,
                    std::strerror(errno));
  auto state = std::make_shared<State>();
  state->path = path;
  state->fd = fd;
  closer.fd = -1;
  live_locks()[path] = state;
  lock.state_ = std::move(state);
  return lock;
}

DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (!state_) return;  // (acquire's own, still empty, when it throws: it holds the mutex)
  std::lock_guard<std::mutex> guard(g_mutex);
  state_.reset();
}

}  // namespace strata
