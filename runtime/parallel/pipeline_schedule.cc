// PipelineSchedule: building GPipe, 1F1B and interleaved 1F1B lists, and the simulation that validates and times them.
#include "runtime/parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "core/error.h"

namespace strata {

const char* pipeline_schedule_name(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGPipe: return "gpipe";
    case PipelineScheduleKind::kOneFOneB: return "1f1b";
    case PipelineScheduleKind::kInterleaved: return "interleaved";
  }
  return "?";
}

PipelineScheduleKind parse_pipeline_schedule(const std::string& name) {
  for (PipelineScheduleKind k :
       {PipelineScheduleKind::kGPipe, PipelineScheduleKind::kOneFOneB, PipelineScheduleKind::kInterleaved})
    if (name == pipeline_schedule_name(k)) return k;
  STRATA_THROW(ErrorCode::kInvalidArgument, "--pp-schedule '{}' is not a schedule: use gpipe, 1f1b or interleaved",
               name);
}

std::string PipelineAction::describe() const {
  switch (kind) {
    case PipelineActionKind::kForward: return fmt::format("F{}@s{}", micro_batch, virtual_stage);
    case PipelineActionKind::kBackward: return fmt::format("B{}@s{}", micro_batch, virtual_stage);
    case PipelineActionKind::kSendActivation:
      return fmt::format("send act {}@s{} -> pp {}", micro_batch, virtual_stage, peer);
    case PipelineActionKind::kRecvActivation:
      return fmt::format("recv act {}@s{} <- pp {}", micro_batch, virtual_stage, peer);
    case PipelineActionKind::kSendGrad:
      return fmt::format("send grad {}@s{} -> pp {}", micro_batch, virtual_stage, peer);
    case PipelineActionKind::kRecvGrad:
      return fmt::format("recv grad {}@s{} <- pp {}", micro_batch, virtual_stage, peer);
  }
  return "?";
}

std::string PipelineAction::token() const {
  switch (kind) {
    case PipelineActionKind::kForward:
    case PipelineActionKind::kBackward: return describe();
    case PipelineActionKind::kSendActivation: return fmt::format("sa{}@s{}>{}", micro_batch, virtual_stage, peer);
    case PipelineActionKind::kRecvActivation: return fmt::format("ra{}@s{}<{}", micro_batch, virtual_stage, peer);
    case PipelineActionKind::kSendGrad: return fmt::format("sg{}@s{}>{}", micro_batch, virtual_stage, peer);
    case PipelineActionKind::kRecvGrad: return fmt::format("rg{}@s{}<{}", micro_batch, virtual_stage, peer);
  }
  return "?";
}

void check_layers(int layers, int pp, int virtual_stages) {
  STRATA_CHECK(pp >= 1 && virtual_stages >= 1, "pipeline stages {} and --pp-virtual {} must be at least 1", pp,
               virtual_stages);
  const int stages = pp * virtual_stages;
  STRATA_CHECK(layers >= stages,
               "a model of {} layers cannot fill {} pipeline stages x {} virtual = {} stages: every stage needs at "
               "least one layer",
               layers, pp, virtual_stages, stages);
}

std::vector<LayerRange> split_layers(int layers, int pp, int virtual_stages) {
  check_layers(layers, pp, virtual_stages);
  const int stages = pp * virtual_stages, base = layers / stages, extra = layers % stages;
  std::vector<LayerRange> out(static_cast<std::size_t>(stages));
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    const int n = base + (s < extra ? 1 : 0);
    out[static_cast<std::size_t>(s)] = LayerRange{next, next + n};
    next += n;
  }
  return out;
}

int micro_batch_size(int batch, int micro_batches) {
  STRATA_CHECK(micro_batches >= 1, "--microbatches {} must be at least 1", micro_batches);
  STRATA_CHECK(batch % micro_batches == 0, "a batch of {} is not divisible by --microbatches {}", batch, micro_batches);
  return batch / micro_batches;
}

double PipelineTimeline::bubble_fraction() const {
  const double total = static_cast<double>(finish.size()) * static_cast<double>(makespan);
  return total > 0 ? (total - static_cast<double>(busy)) / total : 0.0;
}

// ---------------------------------------------------------------------------------------------------------- building

void PipelineSchedule::check(PipelineScheduleKind kind, int pp, int micro_batches, int virtual_stages) {
  const char* name = pipeline_schedule_name(kind);
  STRATA_CHECK(pp >= 1, "{} pipeline stages: there must be at least one", pp);
  STRATA_CHECK(micro_batches >= 1, "--microbatches {} must be at least 1", micro_batches);
  STRATA_CHECK(virtual_stages >= 1, "--pp-virtual {} must be at least 1", virtual_stages);
  STRATA_CHECK(virtual_stages == 1 || kind == PipelineScheduleKind::kInterleaved,
               "--pp-virtual {} needs --pp-schedule interleaved (the schedule is {})", virtual_stages, name);
  STRATA_CHECK(virtual_stages >= 2 || kind != PipelineScheduleKind::kInterleaved,
               "--pp-schedule interleaved needs --pp-virtual 2 or more (got {}); one stage per rank is 1f1b",
               virtual_stages);
  STRATA_CHECK(micro_batches >= pp || kind == PipelineScheduleKind::kGPipe,
               "--microbatches {} is fewer than the {} pipeline stages: {} needs at least one micro-batch per stage",
               micro_batches, pp, kind == PipelineScheduleKind::kInterleaved ? "interleaved 1F1B" : "1F1B");
  STRATA_CHECK(micro_batches % pp == 0 || kind != PipelineScheduleKind::kInterleaved,
               "--microbatches {} is not a multiple of the {} pipeline stages: the interleaved schedule runs "
               "micro-batches in groups of one per stage (Megatron-LM's requirement)",
               micro_batches, pp);
}

namespace {

using Lists = std::vector<std::vector<PipelineAction>>;

// A forward with its activation's receive before it and its send after it (when the neighbour stage is elsewhere).
void emit_forward(Lists& lists, int P, int S, int mb, int s) {
  const int r = s % P;
  auto& l = lists[static_cast<std::size_t>(r)];
  if (s > 0 && (s - 1) % P != r) l.push_back({PipelineActionKind::kRecvActivation, mb, s - 1, (s - 1) % P});
  l.push_back({PipelineActionKind::kForward, mb, s, -1});
  if (s + 1 < S && (s + 1) % P != r) l.push_back({PipelineActionKind::kSendActivation, mb, s, (s + 1) % P});
}

void emit_backward(Lists& lists, int P, int S, int mb, int s) {
  const int r = s % P;
  auto& l = lists[static_cast<std::size_t>(r)];
  if (s + 1 < S && (s + 1) % P != r) l.push_back({PipelineActionKind::kRecvGrad, mb, s + 1, (s + 1) % P});
  l.push_back({PipelineActionKind::kBackward, mb, s, -1});
  if (s > 0 && (s - 1) % P != r) l.push_back({PipelineActionKind::kSendGrad, mb, s, (s - 1) % P});
}

}  // namespace

PipelineSchedule PipelineSchedule::build(PipelineScheduleKind kind, int pp, int micro_batches, int virtual_stages) {
  check(kind, pp, micro_batches, virtual_stages);
  const int P = pp, M = micro_batches, V = virtual_stages, S = P * V;
  Lists lists(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    switch (kind) {
      case PipelineScheduleKind::kGPipe:
        for (int mb = 0; mb < M; ++mb) emit_forward(lists, P, S, mb, r);
        for (int mb = 0; mb < M; ++mb) emit_backward(lists, P, S, mb, r);
        break;
      case PipelineScheduleKind::kOneFOneB: {
        const int warmup = std::min(P - r - 1, M), steady = M - warmup;
        for (int mb = 0; mb < warmup; ++mb) emit_forward(lists, P, S, mb, r);
        for (int i = 0; i < steady; ++i) {
          emit_forward(lists, P, S, warmup + i, r);
          emit_backward(lists, P, S, i, r);
        }
        for (int mb = steady; mb < M; ++mb) emit_backward(lists, P, S, mb, r);
        break;
      }
      case PipelineScheduleKind::kInterleaved: {
        // Megatron-LM numbers a rank's M * V (micro-batch, chunk) pairs k = 0, 1, ..: groups of P micro-batches,
        // each group through chunk 0..V-1 (forward) or V-1..0 (backward).
        const int total = M * V;
        auto chunk = [&](int k, bool forward) {
          const int c = (k % (P * V)) / P;
          return forward ? c : V - 1 - c;
        };
        auto mb_of = [&](int k) { return (k / (P * V)) * P + k % P; };
        const int warmup = M == P ? total : std::min((P - r - 1) * 2 + (V - 1) * P, total);
        const int steady = total - warmup;
        for (int k = 0; k < warmup; ++k) emit_forward(lists, P, S, mb_of(k), chunk(k, true) * P + r);
        for (int k = 0; k < steady; ++k) {
          emit_forward(lists, P, S, mb_of(warmup + k), chunk(warmup + k, true) * P + r);
          emit_backward(lists, P, S, mb_of(k), chunk(k, false) * P + r);
        }
        for (int k = steady; k < total; ++k) emit_backward(lists, P, S, mb_of(k), chunk(k, false) * P + r);
        break;
      }
    }
  }
  return PipelineSchedule(kind, pp, micro_batches, virtual_stages, std::move(lists));
}

PipelineSchedule::PipelineSchedule(PipelineScheduleKind kind, int pp, int micro_batches, int virtual_stages,
                                   std::vector<std::vector<PipelineAction>> actions)
    : kind_(kind),
      pp_(pp),
      micro_batches_(micro_batches),
      virtual_stages_(virtual_stages),
      actions_(std::move(actions)) {
  STRATA_CHECK(pp >= 1 && micro_batches >= 1 && virtual_stages >= 1,
               "a schedule of {} pp ranks, {} micro-batches, {} virtual stages", pp, micro_batches, virtual_stages);
  STRATA_CHECK(static_cast<int>(actions_.size()) == pp, "{} action lists for {} pp ranks", actions_.size(), pp);
}

const std::vector<PipelineAction>& PipelineSchedule::actions(int rank) const {
  STRATA_CHECK(rank >= 0 && rank < pp_, "pp rank {} of {}", rank, pp_);
  return actions_[static_cast<std::size_t>(rank)];
}

// -------------------------------------------------------------------------------------------------------- simulating

namespace {

struct Simulation {
  std::string problem;
  PipelineTimeline timeline;
};

// Runs the ranks' lists round-robin, each as far as it can go until a receive finds nothing to take, until every list
// ends or none can move. Times follow the data: a receive ends no earlier than its send was posted.
Simulation simulate_schedule(const PipelineSchedule& sched, long fcost, long bcost) {
  const int P = sched.pp(), M = sched.micro_batches(), S = sched.num_stages();
  Simulation sim;
  PipelineTimeline& tl = sim.timeline;
  tl.max_in_flight.assign(static_cast<std::size_t>(P), 0);
  tl.finish.assign(static_cast<std::size_t>(P), 0);
  auto key = [S](int mb, int s) { return static_cast<std::size_t>(mb) * static_cast<std::size_t>(S) + s; };
  const std::size_t n = static_cast<std::size_t>(M) * static_cast<std::size_t>(S);
  std::vector<char> fwd(n, 0), bwd(n, 0), sent_act(n, 0), sent_grad(n, 0);
  // Per rank: the activations (of stage s, for stage s + 1) and gradients (of stage s, for stage s - 1) it holds.
  std::vector<std::map<std::size_t, long>> acts(static_cast<std::size_t>(P)), grads(static_cast<std::size_t>(P));
  // (src, dst, gradient?) -> posted (key, time), FIFO.
  std::map<std::tuple<int, int, bool>, std::deque<std::pair<std::size_t, long>>> channels;
  std::vector<std::size_t> pc(static_cast<std::size_t>(P), 0);
  std::vector<long> t(static_cast<std::size_t>(P), 0);
  std::vector<int> in_flight(static_cast<std::size_t>(P), 0);
  auto rank_of = [P](int s) { return s % P; };

  // One action of rank r; "" when done, "wait" when it must wait for a send, else the problem.
  auto step = [&](int r, const PipelineAction& a) -> std::string {
    const std::size_t ru = static_cast<std::size_t>(r);
    const int mb = a.micro_batch, s = a.virtual_stage;
    if (mb < 0 || mb >= M || s < 0 || s >= S)
      return fmt::format("micro-batch {} or stage {} out of range ({} micro-batches, {} stages)", mb, s, M, S);
    const std::size_t k = key(mb, s);
    const bool is_send = a.kind == PipelineActionKind::kSendActivation || a.kind == PipelineActionKind::kSendGrad;
    const bool is_grad = a.kind == PipelineActionKind::kSendGrad || a.kind == PipelineActionKind::kRecvGrad;
    switch (a.kind) {
      case PipelineActionKind::kForward: {
        if (rank_of(s) != r) return fmt::format("stage {} lives on pp rank {}", s, rank_of(s));
        if (fwd[k]) return fmt::format("micro-batch {} is forwarded twice on stage {}", mb, s);
        long start = t[ru];
        if (s > 0) {
          auto it = acts[ru].find(key(mb, s - 1));
          if (it == acts[ru].end())
            return fmt::format("the activation of micro-batch {} from stage {} is not here: {}", mb, s - 1,
                               rank_of(s - 1) == r ? "stage " + std::to_string(s - 1) + " has not forwarded it"
                                                   : "no receive of it comes before this forward");
          start = std::max(start, it->second);
          acts[ru].erase(it);
        }
        t[ru] = start + fcost;
        tl.busy += fcost;
        fwd[k] = 1;
        tl.max_in_flight[ru] = std::max(tl.max_in_flight[ru], ++in_flight[ru]);
        if (s + 1 < S && rank_of(s + 1) == r) acts[ru][k] = t[ru];
        return "";
      }
      case PipelineActionKind::kBackward: {
        if (rank_of(s) != r) return fmt::format("stage {} lives on pp rank {}", s, rank_of(s));
        if (!fwd[k]) return fmt::format("micro-batch {} has not been forwarded on stage {}", mb, s);
        if (bwd[k]) return fmt::format("micro-batch {} is backwarded twice on stage {}", mb, s);
        long start = t[ru];
        if (s + 1 < S) {
          auto it = grads[ru].find(key(mb, s + 1));
          if (it == grads[ru].end())
            return fmt::format("the gradient of micro-batch {} from stage {} is not here: {}", mb, s + 1,
                               rank_of(s + 1) == r ? "stage " + std::to_string(s + 1) + " has not backwarded it"
                                                   : "no receive of it comes before this backward");
          start = std::max(start, it->second);
          grads[ru].erase(it);
        }
        t[ru] = start + bcost;
        tl.busy += bcost;
        bwd[k] = 1;
        --in_flight[ru];
        if (s > 0 && rank_of(s - 1) == r) grads[ru][k] = t[ru];
        return "";
      }
      default: break;
    }
    // A transfer: the producing stage s, the consuming stage s + 1 (activation) or s - 1 (gradient).
    const int consumer = is_grad ? s - 1 : s + 1;
    const char* what = is_grad ? "gradient" : "activation";
    if (consumer < 0 || consumer >= S)
      return fmt::format("stage {} is the {} stage: its {} goes nowhere", s, is_grad ? "first" : "last", what);
    const int src = rank_of(s), dst = rank_of(consumer);
    if (src == dst) return fmt::format("stages {} and {} are both on pp rank {}: no transfer", s, consumer, src);
    if (is_send) {
      if (src != r) return fmt::format("stage {} lives on pp rank {}, which sends its {}", s, src, what);
      if (a.peer != dst) return fmt::format("the {} of stage {} goes to pp rank {}, not {}", what, s, dst, a.peer);
      if (!(is_grad ? bwd[k] : fwd[k]))
        return fmt::format("the {} of micro-batch {} on stage {} is not computed yet", what, mb, s);
      char& sent = is_grad ? sent_grad[k] : sent_act[k];
      if (sent) return fmt::format("the {} of micro-batch {} on stage {} is sent twice", what, mb, s);
      sent = 1;
      channels[{r, dst, is_grad}].push_back({k, t[ru]});
      return "";
    }
    if (dst != r) return fmt::format("the {} of stage {} is for pp rank {}", what, s, dst);
    if (a.peer != src) return fmt::format("the {} of stage {} comes from pp rank {}, not {}", what, s, src, a.peer);
    auto& q = channels[{src, r, is_grad}];
    if (q.empty()) return "wait";
    if (q.front().first != k) {
      const int got_mb = static_cast<int>(q.front().first / static_cast<std::size_t>(S));
      const int got_s = static_cast<int>(q.front().first % static_cast<std::size_t>(S));
      return fmt::format("the next {} from pp rank {} is {}@s{} (transfers match in FIFO order)", what, src, got_mb,
                         got_s);
    }
    t[ru] = std::max(t[ru], q.front().second);
    (is_grad ? grads : acts)[ru][k] = t[ru];
    q.pop_front();
    return "";
  };

  auto where = [&](int r) {
    const std::size_t i = pc[static_cast<std::size_t>(r)];
    return fmt::format("pp rank {}, action {} ({})", r, i, sched.actions(r)[i].describe());
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < P; ++r) {
      const auto& list = sched.actions(r);
      std::size_t& i = pc[static_cast<std::size_t>(r)];
      while (i < list.size()) {
        const std::string status = step(r, list[i]);
        if (status == "wait") break;
        if (!status.empty()) {
          sim.problem = fmt::format("{}: {}", where(r), status);
          return sim;
        }
        ++i;
        moved = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < P; ++r) {
    if (pc[static_cast<std::size_t>(r)] == sched.actions(r).size()) continue;
    const PipelineAction& a = sched.actions(r)[pc[static_cast<std::size_t>(r)]];
    stuck += fmt::format("{}{} waits for a send from pp rank {} that never comes", stuck.empty() ? "" : "; ", where(r),
                         a.peer);
  }
  if (!stuck.empty()) {
    sim.problem = "deadlock: " + stuck;
    return sim;
  }
  for (int mb = 0; mb < M; ++mb)
    for (int s = 0; s < S; ++s) {
      const std::size_t k = key(mb, s);
      if (!fwd[k] || !bwd[k]) {
        sim.problem = fmt::format("micro-batch {} is never {} on stage {} (pp rank {})", mb,
                                  fwd[k] ? "backwarded" : "forwarded", s, rank_of(s));
        return sim;
      }
      if (s + 1 < S && rank_of(s + 1) != rank_of(s) && !sent_act[k]) {
        sim.problem =
            fmt::format("pp rank {} never sends the activation of micro-batch {} on stage {}", rank_of(s), mb, s);
        return sim;
      }
      if (s > 0 && rank_of(s - 1) != rank_of(s) && !sent_grad[k]) {
        sim.problem =
            fmt::format("pp rank {} never sends the gradient of micro-batch {} on stage {}", rank_of(s), mb, s);
        return sim;
      }
    }
  for (const auto& [ch, q] : channels)
    if (!q.empty()) {
      const auto [src, dst, is_grad] = ch;
      sim.problem = fmt::format("pp rank {} sends the {} {}@s{} to pp rank {}, which never receives it", src,
                                is_grad ? "gradient" : "activation", q.front().first / static_cast<std::size_t>(S),
                                q.front().first % static_cast<std::size_t>(S), dst);
      return sim;
    }
  tl.finish = t;
  tl.makespan = *std::max_element(t.begin(), t.end());
  return sim;
}

}  // namespace

std::string PipelineSchedule::find_problem() const { return simulate_schedule(*this, 1, 2).problem; }

void PipelineSchedule::validate() const {
  const std::string problem = find_problem();
  if (!problem.empty())
    STRATA_THROW(ErrorCode::kInvalidArgument, "{} schedule ({} pp ranks, {} micro-batches, {} virtual) is unsound: {}",
                 pipeline_schedule_name(kind_), pp_, micro_batches_, virtual_stages_, problem);
}

PipelineTimeline PipelineSchedule::simulate(long forward_cost, long backward_cost) const {
  Simulation sim = simulate_schedule(*this, forward_cost, backward_cost);
  if (!sim.problem.empty()) validate();  // throws with the problem
  return sim.timeline;
}

std::string PipelineSchedule::to_string() const {
  std::string out = fmt::format("{}: {} pp ranks", pipeline_schedule_name(kind_), pp_);
  if (virtual_stages_ > 1) out += fmt::format(" x {} virtual = {} stages", virtual_stages_, num_stages());
  out += fmt::format(", {} micro-batches (F/B mb@stage; sa/ra, sg/rg: send/recv activation, gradient; >to <from pp)",
                     micro_batches_);
  for (int r = 0; r < pp_; ++r) {
    out += fmt::format("\npp {}:", r);
    for (const PipelineAction& a : actions_[static_cast<std::size_t>(r)]) {
      out += ' ';
      out += a.token();
    }
  }
  return out;
}

}  // namespace strata
