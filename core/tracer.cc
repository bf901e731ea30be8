// Tracer: an in-memory list of spans per rank, serialised as Chrome trace events.
#include "core/tracer.h"

#include <fmt/format.h>

namespace strata {

Tracer& Tracer::global() {
  static Tracer* t = new Tracer();  // never destroyed: stream threads may record during static destruction
  return *t;
}

void Tracer::enable() {
  std::lock_guard<std::mutex> lock(mutex_);
  origin_ = std::chrono::steady_clock::now();
  events_.clear();
  enabled_ = true;
}

std::int64_t Tracer::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - origin_).count();
}

int Tracer::track_id(const std::string& track) {
  for (std::size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i] == track) return static_cast<int>(i);
  tracks_.push_back(track);
  return static_cast<int>(tracks_.size() - 1);
}

void Tracer::complete(const std::string& name, const char* category, const std::string& track, std::int64_t start_us,
                      std::int64_t end_us, const std::string& args) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(Event{name, category, track_id(track), start_us, end_us, args});
}

std::size_t Tracer::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

namespace {
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}
}  // namespace

std::string Tracer::events_json(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"rank {}"}}}})",
                                rank, rank);
  for (std::size_t i = 0; i < tracks_.size(); ++i)
    out += fmt::format(R"(,{{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})", rank, i,
                       escape(tracks_[i]));
  for (const Event& e : events_) {
    out += fmt::format(R"(,{{"name":"{}","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{},"dur":{})", escape(e.name),
                       e.category, rank, e.track, e.start_us, e.end_us - e.start_us);
    if (!e.args.empty()) out += fmt::format(R"(,"args":{{{}}})", e.args);
    out += "}";
  }
  return out;
}

void Tracer::set_range_hooks(PushRange push, PopRange pop) {
  pop_.store(pop);
  push_.store(push);
}

TraceSpan::TraceSpan(std::string name, const char* category, std::string track, std::string args)
    : on_(Tracer::global().enabled()), category_(category) {
  Tracer& t = Tracer::global();
  if (t.has_range_hooks()) {
    t.push_range(name.c_str());
    ranged_ = true;
  }
  if (!on_) return;
  name_ = std::move(name);
  track_ = std::move(track);
  args_ = std::move(args);
  start_us_ = Tracer::global().now_us();
}

TraceSpan::~TraceSpan() {
  if (ranged_) Tracer::global().pop_range();
  if (on_) Tracer::global().complete(name_, category_, track_, start_us_, Tracer::global().now_us(), args_);
}

}  // namespace strata
