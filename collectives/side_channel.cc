// SideChannel: leave notices, questions and answers on a duplicate of MPI_COMM_WORLD, polled from bounded waits.
#include "collectives/side_channel.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/mpi_util.h"
#include "collectives/progress_ledger.h"
#include "collectives/rank_values.h"
#include "core/error.h"
#include "core/in_flight.h"
#include "core/logging.h"
#include "core/wait_hooks.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

enum Tag : int { kLeave = 1, kQuestion = 2, kAnswer = 3 };
constexpr std::size_t kMaxWaitLines = 16;  // bounds an answer

// What a rank said: its counters and, in an answer, the operations it waits in and what it is doing.
struct Report {
  ProgressCounters counters;
  std::vector<std::string> waits;
  std::string status;
};

// One line per item: "C\t<counter>\t<count>", "W\t<label>", "S\t<status>".
std::string encode(const Report& r) {
  std::string out;
  for (const auto& [name, count] : r.counters) out += fmt::format("C\t{}\t{}\n", name, count);
  for (std::size_t i = 0; i < r.waits.size() && i < kMaxWaitLines; ++i) out += "W\t" + r.waits[i] + "\n";
  if (!r.status.empty()) out += "S\t" + r.status + "\n";
  return out;
}

Report decode(const std::string& text) {
  Report r;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.size() < 2 || line[1] != '\t') continue;
    std::string rest = line.substr(2);
    if (line[0] == 'C') {
      std::size_t tab = rest.rfind('\t');
      if (tab == std::string::npos) continue;
      r.counters[rest.substr(0, tab)] = std::strtoull(rest.c_str() + tab + 1, nullptr, 10);
    } else if (line[0] == 'W') {
      r.waits.push_back(rest);
    } else if (line[0] == 'S') {
      r.status = rest;
    }
  }
  return r;
}

std::uint64_t count_of(const Report& r, const std::string& counter) {
  auto it = r.counters.find(counter);
  return it == r.counters.end() ? 0 : it->second;
}

// "a, b" or "nothing Strata tracks".
std::string waits_text(const Report& r) {
  std::string out;
  for (const std::string& w : r.waits) out += (out.empty() ? "" : ", ") + w;
  if (out.empty()) out = "nothing Strata tracks";
  if (!r.status.empty()) out += " (" + r.status + ")";
  return out;
}

// "issued 3 collectives on 'world' (up to seq=2)", "issued no collectives on 'world'".
std::string issued_text(std::uint64_t count, const std::string& counter) {
  if (count == 0) return "issued no " + describe_counter(counter);
  return fmt::format("issued {} {} (up to seq={})", count, describe_counter(counter, count == 1), count - 1);
}

}  // namespace

struct SideChannel::State {
  std::timed_mutex mutex;  // one thread at a time talks on the channel
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  double timeout_s = 600;
  double window_s = 5;  // how long the question waited for answers
  Clock::time_point next_poll{};
  std::vector<std::optional<Report>> left;     // leave notices, by world rank
  std::vector<std::optional<Report>> answers;  // answers to this rank's question
  bool asked = false;                          // the question is asked once per process
  std::string status;                          // what this rank does, for answers given outside a wait
  std::vector<std::string> hosts;              // each world rank's host (MPI_Get_processor_name)
  bool several_hosts = false;                  // the world spans more than one: reports name them
  struct Outgoing {
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<std::string> payload;
  };
  std::vector<Outgoing> outgoing;

  // Callers hold `mutex`.
  void send(int dest, Tag tag, std::string payload) {
    Outgoing o;
    o.payload = std::make_unique<std::string>(std::move(payload));
    STRATA_CHECK_MPI(MPI_Isend(o.payload->data(), static_cast<int>(o.payload->size()), MPI_CHAR, dest, tag, comm,
                               &o.request));
    outgoing.push_back(std::move(o));
  }

  void progress_sends() {
    for (auto it = outgoing.begin(); it != outgoing.end();) {
      int done = 0;
      STRATA_CHECK_MPI(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
      it = done ? outgoing.erase(it) : it + 1;
    }
  }

  // describe_ranks(ranks), and where the world spans several hosts, theirs: "rank 2 on host1".
  std::string ranks_text(const std::vector<int>& ranks) const {
    std::string out = describe_ranks(ranks);
    if (!several_hosts || ranks.empty()) return out;
    std::vector<std::string> on;
    for (int r : ranks)
      if (std::find(on.begin(), on.end(), hosts[static_cast<std::size_t>(r)]) == on.end())
        on.push_back(hosts[static_cast<std::size_t>(r)]);
    std::string names;
    for (const std::string& h : on) names += (names.empty() ? "" : ", ") + h;
    return out + " on " + names;
  }

  Report my_report() const {
    Report r;
    r.counters = ProgressLedger::global().counters();
    for (const PeerWait& w : ProgressLedger::global().waits()) r.waits.push_back(w.label);
    r.status = status;
    return r;
  }

  // Receives every message that has arrived.
  void drain() {
    for (;;) {
      int flag = 0;
      MPI_Message message;
      MPI_Status st;
      STRATA_CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &message, &st));
      if (!flag) return;
      int bytes = 0;
      STRATA_CHECK_MPI(MPI_Get_count(&st, MPI_CHAR, &bytes));
      std::string text(static_cast<std::size_t>(bytes), '\0');
      STRATA_CHECK_MPI(MPI_Mrecv(text.data(), bytes, MPI_CHAR, &message, MPI_STATUS_IGNORE));
      const auto from = static_cast<std::size_t>(st.MPI_SOURCE);
      switch (st.MPI_TAG) {
        case kLeave: left[from] = decode(text); break;
        case kQuestion: send(st.MPI_SOURCE, kAnswer, encode(my_report())); break;
        case kAnswer: answers[from] = decode(text); break;
        default: break;
      }
    }
  }

  // Throws kMismatch when this rank waits in an operation that a rank which has left never issued.
  void check_departures() {
    if (std::none_of(left.begin(), left.end(), [](const auto& l) { return l.has_value(); })) return;
    for (const PeerWait& w : ProgressLedger::global().waits()) {
      for (const PeerNeed& need : w.needs) {
        const auto& l = left[static_cast<std::size_t>(need.world_rank)];
        if (!l) continue;
        std::uint64_t count = count_of(*l, need.counter);
        if (count > need.seq) continue;  // it took part; the operation is only finishing here
        STRATA_THROW(ErrorCode::kMismatch,
                     "{} left the job (its Runtime shut down normally) after it {}, while this rank waits in {}, "
                     "which needs it: the ranks ran different numbers of steps or collectives; in flight on this "
                     "rank:\n{}",
                     ranks_text({need.world_rank}), issued_text(count, need.counter), w.label,
                     InFlightTable::global().describe());
      }
    }
  }

  void poll() {
    std::unique_lock<std::timed_mutex> lock(mutex, std::try_to_lock);
    if (!lock.owns_lock() || comm == MPI_COMM_NULL) return;  // another thread is polling
    auto now = Clock::now();
    if (now < next_poll) return;
    next_poll = now + std::chrono::milliseconds(5);
    drain();
    progress_sends();
    check_departures();
  }

  // Asks every rank still here once (waiting min(3 s, half the wait's timeout) for answers), then describes this
  // rank's waits with their answers.
  std::string report(double wait_timeout_s) {
    const double window = std::clamp(wait_timeout_s / 2, 0.0, 3.0);
    std::unique_lock<std::timed_mutex> lock(mutex, std::defer_lock);
    if (!lock.try_lock_for(std::chrono::duration<double>(window + 1.0)) || comm == MPI_COMM_NULL)
      return "(the side channel was busy: no report from the other ranks)";
    std::vector<int> asked_ranks;
    for (int r = 0; r < size; ++r)
      if (r != rank && !left[static_cast<std::size_t>(r)]) asked_ranks.push_back(r);
    if (!asked) {
      asked = true;
      window_s = window;
      status = "timed out itself";
      for (int r : asked_ranks) send(r, kQuestion, {});
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(window_s));
      auto waiting = [&] {
        return std::any_of(asked_ranks.begin(), asked_ranks.end(),
                           [&](int r) { return !answers[static_cast<std::size_t>(r)]; });
      };
      while (waiting() && Clock::now() < deadline) {
        drain();
        progress_sends();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return describe(asked_ranks);
  }

  std::string describe(const std::vector<int>& asked_ranks) const {
    std::string out = fmt::format("what the other ranks said on the side channel (asked once, answers within {} s):\n",
                                  window_s);
    const std::string silent = fmt::format(
        "no answer on the side channel within {} s: stopped, dead or busy outside Strata", window_s);
    auto said = [&](int r) -> const std::optional<Report>& {
      const auto& l = left[static_cast<std::size_t>(r)];
      return l ? l : answers[static_cast<std::size_t>(r)];
    };
    bool any_needs = false;
    for (const PeerWait& w : ProgressLedger::global().waits()) {
      if (w.needs.empty()) continue;
      any_needs = true;
      std::vector<int> in_it{rank}, never;
      for (const PeerNeed& need : w.needs) {
        const auto& s = said(need.world_rank);
        if (!s) {
          never.push_back(need.world_rank);
        } else if (count_of(*s, need.counter) > need.seq) {
          in_it.push_back(need.world_rank);
        } else {
          bool gone = left[static_cast<std::size_t>(need.world_rank)].has_value();
          out += fmt::format("  {} has not reached {}: it {}; {}\n", ranks_text({need.world_rank}), w.label,
                             issued_text(count_of(*s, need.counter), need.counter),
                             gone ? std::string("it has left the job") : "it waits in: " + waits_text(*s));
        }
      }
      std::sort(in_it.begin(), in_it.end());
      if (!never.empty())
        out += fmt::format("  {} never arrived at {} ({}); waiting in it: {}\n", ranks_text(never), w.label, silent,
                           ranks_text(in_it));
      else
        out += fmt::format("  waiting in {}: {}\n", w.label, ranks_text(in_it));
    }
    if (!any_needs) {
      for (int r : asked_ranks) {
        const auto& s = answers[static_cast<std::size_t>(r)];
        out += s ? fmt::format("  {} waits in: {}\n", ranks_text({r}), waits_text(*s))
                 : fmt::format("  {}: {}\n", ranks_text({r}), silent);
      }
    }
    return out;
  }

  bool leave() {
    std::lock_guard<std::timed_mutex> lock(mutex);
    if (comm == MPI_COMM_NULL) return true;
    status = "leaving: its Runtime shut down normally, waiting for the other ranks to leave";
    Report mine;
    mine.counters = ProgressLedger::global().counters();
    std::string notice = encode(mine);
    for (int r = 0; r < size; ++r)
      if (r != rank) send(r, kLeave, notice);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::clamp(timeout_s, 0.0, 1e9)));
    auto missing = [&] {
      std::vector<int> out;
      for (int r = 0; r < size; ++r)
        if (r != rank && !left[static_cast<std::size_t>(r)]) out.push_back(r);
      return out;
    };
    while (!missing().empty() || !outgoing.empty()) {
      drain();
      progress_sends();
      if (Clock::now() >= deadline) {
        std::vector<int> m = missing();
        if (m.empty())
          logger("comm").error("at shutdown: this rank's leave notices were not delivered within {} s "
                               "(STRATA_TIMEOUT_S); not finalising MPI, which could wait without a bound",
                               timeout_s);
        else
          logger("comm").error("at shutdown: {} did not leave within {} s (STRATA_TIMEOUT_S); not finalising MPI, "
                               "which would wait for them without a bound",
                               ranks_text(m), timeout_s);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }

  void close() {
    std::lock_guard<std::timed_mutex> lock(mutex);
    if (comm == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      for (Outgoing& o : outgoing) MPI_Request_free(&o.request);  // they complete (or die with the job) on their own
      MPI_Comm_free(&comm);
    }
    outgoing.clear();
    comm = MPI_COMM_NULL;
  }
};

SideChannel::SideChannel(double timeout_s) : state_(std::make_shared<State>()) {
  State& s = *state_;
  STRATA_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &s.rank));
  STRATA_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &s.size));
  s.timeout_s = timeout_s;
  s.left.resize(static_cast<std::size_t>(s.size));
  s.answers.resize(static_cast<std::size_t>(s.size));
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Comm_idup(MPI_COMM_WORLD, &s.comm, &req));
  mpi_wait(req, timeout_s, "creating the side channel (a duplicate of MPI_COMM_WORLD)");
  if (s.size == 1) return;  // nobody to talk to
  // Every rank's host, for reports that say where a silent rank runs.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  STRATA_CHECK_MPI(MPI_Get_processor_name(name, &length));
  std::vector<char> names(static_cast<std::size_t>(s.size) * MPI_MAX_PROCESSOR_NAME);
  STRATA_CHECK_MPI(MPI_Iallgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                                  MPI_CHAR, s.comm, &req));
  mpi_wait(req, timeout_s, "exchanging host names on the side channel");
  for (int r = 0; r < s.size; ++r) {
    const char* at = names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    s.hosts.emplace_back(at, strnlen(at, MPI_MAX_PROCESSOR_NAME));
  }
  s.several_hosts = std::any_of(s.hosts.begin(), s.hosts.end(), [&](const std::string& h) { return h != s.hosts[0]; });
  std::shared_ptr<State> state = state_;
  poller_id_ = WaitHooks::add_poller([state] { state->poll(); });
  reporter_id_ = WaitHooks::add_timeout_reporter(
      [state](const std::string&, double wait_timeout_s) { return state->report(wait_timeout_s); });
}

SideChannel::~SideChannel() {
  if (poller_id_) WaitHooks::remove(poller_id_);
  if (reporter_id_) WaitHooks::remove(reporter_id_);
  state_->close();
}

bool SideChannel::leave() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || state_->size == 1) return true;
  return state_->leave();
}

}  // namespace strata
