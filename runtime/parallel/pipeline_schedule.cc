// PipelineSchedule: building GPipe, 1F1B and interleaved 1F1B lists, and the simulation that validates and times them.
#include "runtime/parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
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

// The pieces of a forward or backward of stage s on its rank: the receive of its input, the compute, the send of its
// output (a transfer only when the neighbour stage is on another rank).
void recv_forward(Lists& lists, int P, int mb, int s) {
  const int r = s % P;
  if (s > 0 && (s - 1) % P != r)
    lists[static_cast<std::size_t>(r)].push_back({PipelineActionKind::kRecvActivation, mb, s - 1, (s - 1) % P});
}
void send_forward(Lists& lists, int P, int S, int mb, int s) {
  const int r = s % P;
  if (s + 1 < S && (s + 1) % P != r)
    lists[static_cast<std::size_t>(r)].push_back({PipelineActionKind::kSendActivation, mb, s, (s + 1) % P});
}
void recv_backward(Lists& lists, int P, int S, int mb, int s) {
  const int r = s % P;
  if (s + 1 < S && (s + 1) % P != r)
    lists[static_cast<std::size_t>(r)].push_back({PipelineActionKind::kRecvGrad, mb, s + 1, (s + 1) % P});
}
void send_backward(Lists& lists, int P, int mb, int s) {
  const int r = s % P;
  if (s > 0 && (s - 1) % P != r)
    lists[static_cast<std::size_t>(r)].push_back({PipelineActionKind::kSendGrad, mb, s, (s - 1) % P});
}
void compute(Lists& lists, int P, PipelineActionKind kind, int mb, int s) {
  lists[static_cast<std::size_t>(s % P)].push_back({kind, mb, s, -1});
}

// A forward with its activation's receive before it and its send after it.
void emit_forward(Lists& lists, int P, int S, int mb, int s) {
  recv_forward(lists, P, mb, s);
  compute(lists, P, PipelineActionKind::kForward, mb, s);
  send_forward(lists, P, S, mb, s);
}

void emit_backward(Lists& lists, int P, int S, int mb, int s) {
  recv_backward(lists, P, S, mb, s);
  compute(lists, P, PipelineActionKind::kBackward, mb, s);
  send_backward(lists, P, mb, s);
}

// One steady-state forward and backward of the interleaved schedule as Megatron-LM runs them: both inputs received
// before the forward, both outputs sent after the backward, so that the outputs and the next pair's inputs form one
// step (its send_forward_backward_recv_forward_backward). See the header's note on the interleaved order.
void emit_forward_backward(Lists& lists, int P, int S, int fmb, int fs, int bmb, int bs) {
  recv_forward(lists, P, fmb, fs);
  recv_backward(lists, P, S, bmb, bs);
  compute(lists, P, PipelineActionKind::kForward, fmb, fs);
  compute(lists, P, PipelineActionKind::kBackward, bmb, bs);
  send_forward(lists, P, S, fmb, fs);
  send_backward(lists, P, bmb, bs);
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
          emit_forward_backward(lists, P, S, mb_of(warmup + k), chunk(warmup + k, true) * P + r, mb_of(k),
                                chunk(k, false) * P + r);
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

bool is_transfer(PipelineActionKind kind) {
  return kind != PipelineActionKind::kForward && kind != PipelineActionKind::kBackward;
}
bool is_send(PipelineActionKind kind) {
  return kind == PipelineActionKind::kSendActivation || kind == PipelineActionKind::kSendGrad;
}
bool is_grad(PipelineActionKind kind) {
  return kind == PipelineActionKind::kSendGrad || kind == PipelineActionKind::kRecvGrad;
}

}  // namespace

std::vector<PipelineStep> PipelineSchedule::steps(int rank) const {
  const auto& list = actions(rank);
  std::vector<PipelineStep> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const bool transfer = is_transfer(list[i].kind);
    if (!transfer || out.empty() || !out.back().transfer)
      out.push_back(PipelineStep{transfer, static_cast<int>(i), {}});
    out.back().actions.push_back(list[i]);
  }
  return out;
}

int PipelineSchedule::max_in_flight(int rank) const {
  int held = 0, most = 0;
  for (const PipelineAction& a : actions(rank)) {
    if (a.kind == PipelineActionKind::kForward) most = std::max(most, ++held);
    if (a.kind == PipelineActionKind::kBackward) --held;
  }
  return most;
}

namespace {

struct Simulation {
  std::string problem;
  PipelineTimeline timeline;
};

// One side of a posted transfer.
struct Posted {
  int rank = 0;
  std::size_t action = 0;  // index in the rank's list
  std::size_t key = 0;     // micro-batch * S + stage
  long time = 0;           // when the rank posted its step
};

// The posted sends and receives of one (source, destination, gradient?) channel, in posting order: the n-th send
// matches the n-th receive.
struct Channel {
  std::vector<Posted> sends, recvs;
};

// A transfer of the step a rank has posted and waits on.
struct Pending {
  Channel* channel = nullptr;
  bool send = false;
  std::size_t index = 0;  // its place among the channel's sends or receives
  std::size_t action = 0;
};

// Runs the ranks' steps round-robin, each as far as it can go until a transfer step waits for a counterpart, until
// every list ends or none can move. Times follow the data: a transfer step ends when its last counterpart is posted.
Simulation simulate_schedule(const PipelineSchedule& sched, long fcost, long bcost) {
  const int P = sched.pp(), M = sched.micro_batches(), S = sched.num_stages();
  Simulation sim;
  PipelineTimeline& tl = sim.timeline;
  tl.max_in_flight.assign(static_cast<std::size_t>(P), 0);
  tl.finish.assign(static_cast<std::size_t>(P), 0);
  auto key = [S](int mb, int s) { return static_cast<std::size_t>(mb) * static_cast<std::size_t>(S) + s; };
  auto key_name = [S](std::size_t k) {
    return fmt::format("{}@s{}", k / static_cast<std::size_t>(S), k % static_cast<std::size_t>(S));
  };
  const std::size_t n = static_cast<std::size_t>(M) * static_cast<std::size_t>(S);
  std::vector<char> fwd(n, 0), bwd(n, 0), sent_act(n, 0), sent_grad(n, 0);
  // Per rank: the activations (of stage s, for stage s + 1) and gradients (of stage s, for stage s - 1) it holds.
  std::vector<std::map<std::size_t, long>> acts(static_cast<std::size_t>(P)), grads(static_cast<std::size_t>(P));
  std::map<std::tuple<int, int, bool>, Channel> channels;
  std::vector<std::vector<PipelineStep>> steps(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) steps[static_cast<std::size_t>(r)] = sched.steps(r);
  std::vector<std::size_t> pc(static_cast<std::size_t>(P), 0);  // per rank: its current step
  std::vector<std::vector<Pending>> pending(static_cast<std::size_t>(P));
  std::vector<char> posted(static_cast<std::size_t>(P), 0);  // per rank: its current (transfer) step is posted
  std::vector<long> t(static_cast<std::size_t>(P), 0);
  std::vector<int> in_flight(static_cast<std::size_t>(P), 0);
  auto rank_of = [P](int s) { return s % P; };
  auto where = [&](int r, std::size_t i) {
    return fmt::format("pp rank {}, action {} ({})", r, i, sched.actions(r)[i].describe());
  };

  // A forward or backward of rank r: "" when done, else the problem.
  auto compute = [&](int r, const PipelineAction& a) -> std::string {
    const std::size_t ru = static_cast<std::size_t>(r);
    const int mb = a.micro_batch, s = a.virtual_stage;
    if (mb < 0 || mb >= M || s < 0 || s >= S)
      return fmt::format("micro-batch {} or stage {} out of range ({} micro-batches, {} stages)", mb, s, M, S);
    const std::size_t k = key(mb, s);
    if (rank_of(s) != r) return fmt::format("stage {} lives on pp rank {}", s, rank_of(s));
    if (a.kind == PipelineActionKind::kForward) {
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
  };

  // Posts transfer `i` of rank r (part of the step it has reached): "" when posted, else the problem.
  auto post = [&](int r, std::size_t i, const PipelineAction& a) -> std::string {
    const std::size_t ru = static_cast<std::size_t>(r);
    const int mb = a.micro_batch, s = a.virtual_stage;
    if (mb < 0 || mb >= M || s < 0 || s >= S)
      return fmt::format("micro-batch {} or stage {} out of range ({} micro-batches, {} stages)", mb, s, M, S);
    const std::size_t k = key(mb, s);
    const bool send = is_send(a.kind), grad = is_grad(a.kind);
    // The producing stage s, the consuming stage s + 1 (activation) or s - 1 (gradient).
    const int consumer = grad ? s - 1 : s + 1;
    const char* what = grad ? "gradient" : "activation";
    if (consumer < 0 || consumer >= S)
      return fmt::format("stage {} is the {} stage: its {} goes nowhere", s, grad ? "first" : "last", what);
    const int src = rank_of(s), dst = rank_of(consumer);
    if (src == dst) return fmt::format("stages {} and {} are both on pp rank {}: no transfer", s, consumer, src);
    Channel& ch = channels[{src, dst, grad}];
    if (send) {
      if (src != r) return fmt::format("stage {} lives on pp rank {}, which sends its {}", s, src, what);
      if (a.peer != dst) return fmt::format("the {} of stage {} goes to pp rank {}, not {}", what, s, dst, a.peer);
      if (!(grad ? bwd[k] : fwd[k]))
        return fmt::format("the {} of micro-batch {} on stage {} is not computed yet", what, mb, s);
      char& sent = grad ? sent_grad[k] : sent_act[k];
      if (sent) return fmt::format("the {} of micro-batch {} on stage {} is sent twice", what, mb, s);
      sent = 1;
    } else {
      if (dst != r) return fmt::format("the {} of stage {} is for pp rank {}", what, s, dst);
      if (a.peer != src) return fmt::format("the {} of stage {} comes from pp rank {}, not {}", what, s, src, a.peer);
    }
    auto& mine = send ? ch.sends : ch.recvs;
    pending[ru].push_back(Pending{&ch, send, mine.size(), i});
    mine.push_back(Posted{r, i, k, t[ru]});
    return "";
  };

  // Rank r's posted step: "" when complete (receives delivered, the clock moved on), "wait" while a counterpart is
  // missing, else the problem (a FIFO mismatch, named at the receive).
  auto complete = [&](int r) -> std::string {
    const std::size_t ru = static_cast<std::size_t>(r);
    long end = t[ru];
    bool ready = true;
    for (const Pending& p : pending[ru]) {
      const auto& other = p.send ? p.channel->recvs : p.channel->sends;
      if (p.index >= other.size()) {
        ready = false;
        continue;
      }
      const Posted& snd = p.send ? p.channel->sends[p.index] : other[p.index];
      const Posted& rcv = p.send ? other[p.index] : p.channel->recvs[p.index];
      if (snd.key != rcv.key) {
        const bool grad = is_grad(sched.actions(rcv.rank)[rcv.action].kind);
        return fmt::format("{}: the next {} from pp rank {} is {} (transfers match in FIFO order)",
                           where(rcv.rank, rcv.action), grad ? "gradient" : "activation", snd.rank, key_name(snd.key));
      }
      end = std::max(end, other[p.index].time);
    }
    if (!ready) return "wait";
    for (const Pending& p : pending[ru]) {
      if (p.send) continue;
      const PipelineAction& a = sched.actions(r)[p.action];
      (is_grad(a.kind) ? grads : acts)[ru][key(a.micro_batch, a.virtual_stage)] = end;
    }
    t[ru] = end;
    pending[ru].clear();
    return "";
  };

  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < P; ++r) {
      const std::size_t ru = static_cast<std::size_t>(r);
      const auto& rank_steps = steps[ru];
      while (pc[ru] < rank_steps.size()) {
        const PipelineStep& st = rank_steps[pc[ru]];
        if (!st.transfer) {
          const std::string problem = compute(r, st.actions[0]);
          if (!problem.empty()) {
            sim.problem = fmt::format("{}: {}", where(r, static_cast<std::size_t>(st.first)), problem);
            return sim;
          }
        } else {
          if (!posted[ru]) {
            for (std::size_t j = 0; j < st.actions.size(); ++j) {
              const std::size_t i = static_cast<std::size_t>(st.first) + j;
              const std::string problem = post(r, i, st.actions[j]);
              if (!problem.empty()) {
                sim.problem = fmt::format("{}: {}", where(r, i), problem);
                return sim;
              }
            }
            posted[ru] = 1;
            moved = true;
          }
          const std::string status = complete(r);
          if (status == "wait") break;
          if (!status.empty()) {
            sim.problem = status;
            return sim;
          }
          posted[ru] = 0;
        }
        ++pc[ru];
        moved = true;
      }
    }
  }

  // Stuck: name, for every rank, the first transfer of its step whose counterpart is never posted, and where that
  // counterpart is (a step its peer never reaches) or that it does not exist.
  std::string stuck;
  for (int r = 0; r < P; ++r) {
    const std::size_t ru = static_cast<std::size_t>(r);
    if (pc[ru] == steps[ru].size()) continue;
    for (const Pending& p : pending[ru]) {
      const auto& other = p.send ? p.channel->recvs : p.channel->sends;
      if (p.index < other.size()) continue;
      const PipelineAction& a = sched.actions(r)[p.action];
      const int peer = a.peer;
      const char* what = is_grad(a.kind) ? "gradients" : "activations";
      // The counterpart in the peer's list: its (index + 1)-th transfer of the matching kind with this rank.
      const PipelineActionKind want =
          is_grad(a.kind) ? (p.send ? PipelineActionKind::kRecvGrad : PipelineActionKind::kSendGrad)
                          : (p.send ? PipelineActionKind::kRecvActivation : PipelineActionKind::kSendActivation);
      const auto& peer_list = sched.actions(peer);
      std::size_t seen = 0, at = peer_list.size();
      for (std::size_t i = 0; i < peer_list.size() && at == peer_list.size(); ++i)
        if (peer_list[i].kind == want && peer_list[i].peer == r && seen++ == p.index) at = i;
      std::string detail;
      if (at == peer_list.size()) {
        detail = p.send ? fmt::format("pp rank {} receives only {} {} from pp rank {}", peer, seen, what, r)
                        : fmt::format("pp rank {} sends only {} {} to pp rank {}", peer, seen, what, r);
      } else {
        const std::size_t peer_pc = pc[static_cast<std::size_t>(peer)];
        const auto& peer_steps = steps[static_cast<std::size_t>(peer)];
        detail = fmt::format("pp rank {} posts it at its action {}, but its step at action {} never completes", peer,
                             at, peer_pc < peer_steps.size() ? peer_steps[peer_pc].first : -1);
      }
      stuck += fmt::format("{}{} waits for a {} pp rank {} that never comes ({})", stuck.empty() ? "" : "; ",
                           where(r, p.action), p.send ? "receive on" : "send from", peer, detail);
      break;
    }
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
  // Every list ran to its end, so every posted transfer met its counterpart: nothing is left unreceived.
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
