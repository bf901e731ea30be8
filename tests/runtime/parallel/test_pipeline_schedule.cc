// Pipeline schedules as data: every kind over P in 1..4 and 8 builds, validates, runs each (micro-batch, stage) once,
// holds the expected micro-batches in flight and has the expected bubble; every built schedule over P in 1..8 completes
// with rendezvous steps; bad options and hand-broken schedules (one sound only with buffered sends) are refused with
// messages naming the values; the layer split. Single-process checks (cheap at every np).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "runtime/parallel/pipeline_schedule.h"

namespace strata {
namespace {

using Kind = PipelineScheduleKind;
using Act = PipelineActionKind;

struct Config {
  Kind kind;
  int P, M, V;
};

std::string name(const Config& c) {
  return fmt::format("{} P={} M={} V={}", pipeline_schedule_name(c.kind), c.P, c.M, c.V);
}

// The configurations the issue asks for: P in 1..4 and 8, M in {P, P+1, 2P, 8}, V in {2, 3} for interleaved where
// M is a multiple of P (M < P is refused for 1F1B and interleaved, so it never arises here).
std::vector<Config> configs() {
  std::vector<Config> out;
  for (int P : {1, 2, 3, 4, 8})
    for (int M : std::set<int>{P, P + 1, 2 * P, 8}) {
      out.push_back({Kind::kGPipe, P, M, 1});
      if (M >= P) out.push_back({Kind::kOneFOneB, P, M, 1});
      if (M >= P && M % P == 0)
        for (int V : {2, 3}) out.push_back({Kind::kInterleaved, P, M, V});
    }
  return out;
}

// The message of the strata::Error fn throws (code kInvalidArgument); "" and a failure when none.
template <typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a strata::Error";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// Megatron-LM's warm-up forwards of the interleaved schedule on rank r.
int interleaved_warmup(int P, int M, int V, int r) {
  return M == P ? M * V : std::min((P - r - 1) * 2 + (V - 1) * P, M * V);
}

TEST(PipelineSchedule, NamesRoundTripAndUnknownNamesAreRefused) {
  for (Kind k : {Kind::kGPipe, Kind::kOneFOneB, Kind::kInterleaved})
    EXPECT_EQ(parse_pipeline_schedule(pipeline_schedule_name(k)), k);
  EXPECT_STREQ(pipeline_schedule_name(Kind::kOneFOneB), "1f1b");
  const std::string m = message_of([] { parse_pipeline_schedule("zero-bubble"); });
  EXPECT_HAS(m, "'zero-bubble'");
  EXPECT_HAS(m, "gpipe, 1f1b or interleaved");
}

TEST(PipelineSchedule, EveryKindBuildsValidatesAndRunsEachStageOnce) {
  int checked = 0;
  for (const Config& c : configs()) {
    SCOPED_TRACE(name(c));
    const PipelineSchedule sched = PipelineSchedule::build(c.kind, c.P, c.M, c.V);
    ASSERT_EQ(sched.find_problem(), "");
    EXPECT_NO_THROW(sched.validate());
    const int S = c.P * c.V;
    // Counted from the lists, independently of the simulation: one forward and one backward of every (mb, s), on
    // rank s % P; one send and one receive for every output crossing ranks, each naming the right peer.
    std::map<std::tuple<int, int, int>, int> count;  // (kind, mb, s) -> times
    for (int r = 0; r < c.P; ++r)
      for (const PipelineAction& a : sched.actions(r)) {
        ++count[{static_cast<int>(a.kind), a.micro_batch, a.virtual_stage}];
        switch (a.kind) {
          case Act::kForward:
          case Act::kBackward: EXPECT_EQ(a.virtual_stage % c.P, r) << a.describe(); break;
          case Act::kSendActivation: EXPECT_EQ(a.peer, (a.virtual_stage + 1) % c.P) << a.describe(); break;
          case Act::kRecvActivation: EXPECT_EQ(a.peer, a.virtual_stage % c.P) << a.describe(); break;
          case Act::kSendGrad: EXPECT_EQ(a.peer, (a.virtual_stage - 1) % c.P) << a.describe(); break;
          case Act::kRecvGrad: EXPECT_EQ(a.peer, a.virtual_stage % c.P) << a.describe(); break;
        }
      }
    const bool crosses = c.P > 1;  // with one rank, consecutive chunks hand over locally
    for (int mb = 0; mb < c.M; ++mb)
      for (int s = 0; s < S; ++s) {
        auto n = [&](Act k) { return count[{static_cast<int>(k), mb, s}]; };
        EXPECT_EQ(n(Act::kForward), 1) << mb << "@s" << s;
        EXPECT_EQ(n(Act::kBackward), 1) << mb << "@s" << s;
        EXPECT_EQ(n(Act::kSendActivation), s + 1 < S && crosses ? 1 : 0) << mb << "@s" << s;
        EXPECT_EQ(n(Act::kRecvActivation), s + 1 < S && crosses ? 1 : 0) << mb << "@s" << s;
        EXPECT_EQ(n(Act::kSendGrad), s > 0 && crosses ? 1 : 0) << mb << "@s" << s;
        EXPECT_EQ(n(Act::kRecvGrad), s > 0 && crosses ? 1 : 0) << mb << "@s" << s;
      }
    // Micro-batches in flight (forwarded, not yet backwarded) per rank, in (micro-batch, chunk) pairs.
    const PipelineTimeline tl = sched.simulate();
    for (int r = 0; r < c.P; ++r) {
      const int held = tl.max_in_flight[static_cast<std::size_t>(r)];
      switch (c.kind) {
        case Kind::kGPipe: EXPECT_EQ(held, c.M) << "rank " << r; break;
        case Kind::kOneFOneB: EXPECT_EQ(held, std::min(c.P - r, c.M)) << "rank " << r; break;
        case Kind::kInterleaved: {
          const int w = interleaved_warmup(c.P, c.M, c.V, r);
          EXPECT_EQ(held, w == c.M * c.V ? w : w + 1) << "rank " << r;
          break;
        }
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 58);  // 19 gpipe, 19 1f1b, 20 interleaved
}

// Forward 1 unit, backward 2 units (per stage), free transfers. GPipe and 1F1B then take exactly 3 (M + P - 1): the
// last stage starts its first backward at M + P - 1 (GPipe) or P (1F1B), every rank is busy 3M, and the first stage
// ends 2 (P - 1) after the last one. Bubble (P - 1) / (M + P - 1), the textbook figure, with no approximation.
// Interleaved with V chunks of 1/V of the layers each: the bubble shrinks to (P - 1) / (V M + P - 1) (Megatron-LM's
// (1/V) (P - 1) / M in its own normalisation) when M is a multiple of P.
TEST(PipelineSchedule, BubbleMatchesTheClosedForms) {
  for (const Config& c : configs()) {
    SCOPED_TRACE(name(c));
    const PipelineSchedule sched = PipelineSchedule::build(c.kind, c.P, c.M, c.V);
    const PipelineTimeline tl = sched.simulate(1, 2);
    EXPECT_EQ(tl.busy, 3L * c.M * c.V * c.P);
    if (c.kind != Kind::kInterleaved) {
      EXPECT_EQ(tl.makespan, 3L * (c.M + c.P - 1));
      EXPECT_DOUBLE_EQ(tl.bubble_fraction(), double(c.P - 1) / double(c.M + c.P - 1));
    } else {
      // In chunk units (a chunk forward is 1, a full-model forward on one rank V).
      EXPECT_EQ(tl.makespan, 3L * (c.V * c.M + c.P - 1));
      EXPECT_DOUBLE_EQ(tl.bubble_fraction(), double(c.P - 1) / double(c.V * c.M + c.P - 1));
      const double one_f_one_b = double(c.P - 1) / double(c.M + c.P - 1);
      if (c.P > 1) {
        EXPECT_LT(tl.bubble_fraction(), one_f_one_b);
      }
    }
  }
  // GPipe with fewer micro-batches than stages: the same closed form.
  const PipelineTimeline g = PipelineSchedule::build(Kind::kGPipe, 4, 2).simulate(1, 2);
  EXPECT_EQ(g.makespan, 3L * (2 + 4 - 1));
  EXPECT_EQ(g.max_in_flight, (std::vector<int>{2, 2, 2, 2}));
  // Other costs: 1F1B is (M + P - 1) (F + B) for any F, B (the bubble is (P - 1) (F + B)).
  EXPECT_EQ(PipelineSchedule::build(Kind::kOneFOneB, 4, 8).simulate(3, 5).makespan, (8 + 4 - 1) * (3 + 5));
}

TEST(PipelineSchedule, BadOptionsAreClearErrors) {
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kOneFOneB, 4, 2); }),
             "--microbatches 2 is fewer than the 4 pipeline stages: 1F1B needs at least one micro-batch per stage");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kInterleaved, 4, 2, 2); }),
             "--microbatches 2 is fewer than the 4 pipeline stages: interleaved 1F1B");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kInterleaved, 4, 6, 2); }),
             "--microbatches 6 is not a multiple of the 4 pipeline stages");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kOneFOneB, 2, 4, 2); }),
             "--pp-virtual 2 needs --pp-schedule interleaved (the schedule is 1f1b)");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kGPipe, 2, 4, 3); }), "(the schedule is gpipe)");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kInterleaved, 2, 4, 1); }),
             "--pp-schedule interleaved needs --pp-virtual 2 or more (got 1)");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kGPipe, 0, 4); }), "0 pipeline stages");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kGPipe, 2, 0); }), "--microbatches 0 must be at least 1");
  EXPECT_HAS(message_of([] { PipelineSchedule::build(Kind::kInterleaved, 2, 4, 0); }), "--pp-virtual 0");
  // GPipe accepts M < P (all it costs is a larger bubble).
  EXPECT_EQ(PipelineSchedule::build(Kind::kGPipe, 4, 2).find_problem(), "");
  EXPECT_EQ(micro_batch_size(12, 4), 3);
  EXPECT_HAS(message_of([] { micro_batch_size(10, 4); }), "a batch of 10 is not divisible by --microbatches 4");
}

TEST(PipelineSchedule, LayersSplitContiguouslyEarlierStagesTakeTheExtra) {
  auto ranges = [](const std::vector<LayerRange>& v) {
    std::vector<std::pair<int, int>> out;
    for (const LayerRange& r : v) out.push_back({r.first, r.last});
    return out;
  };
  using V = std::vector<std::pair<int, int>>;
  EXPECT_EQ(ranges(split_layers(7, 4, 1)), (V{{0, 2}, {2, 4}, {4, 6}, {6, 7}}));
  // 8 layers over 2 ranks x 2 chunks: stages 0, 1, 2, 3 on ranks 0, 1, 0, 1.
  EXPECT_EQ(ranges(split_layers(8, 2, 2)), (V{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(ranges(split_layers(4, 4, 1)), (V{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(ranges(split_layers(12, 1, 1)), (V{{0, 12}}));
  EXPECT_EQ(ranges(split_layers(11, 2, 2)), (V{{0, 3}, {3, 6}, {6, 9}, {9, 11}}));
  EXPECT_HAS(message_of([] { check_layers(3, 2, 2); }),
             "a model of 3 layers cannot fill 2 pipeline stages x 2 virtual = 4 stages");
  EXPECT_HAS(message_of([] { split_layers(7, 8, 1); }), "a model of 7 layers cannot fill 8 pipeline stages");
  EXPECT_NO_THROW(check_layers(8, 4, 2));
}

// Hand-broken schedules: each edit of a sound one must be refused, naming the rank, the action and what it lacked.
TEST(PipelineSchedule, BrokenSchedulesAreRejected) {
  const PipelineSchedule good = PipelineSchedule::build(Kind::kOneFOneB, 2, 4);
  auto edited = [&](const std::function<void(std::vector<std::vector<PipelineAction>>&)>& edit) {
    auto lists = good.all_actions();
    edit(lists);
    return PipelineSchedule(good.kind(), good.pp(), good.micro_batches(), good.virtual_stages(), lists);
  };
  auto find = [](const std::vector<PipelineAction>& l, PipelineAction a) {
    return static_cast<std::size_t>(std::find(l.begin(), l.end(), a) - l.begin());
  };
  // Swap a receive with the forward that needs it.
  {
    const PipelineSchedule s = edited([&](auto& l) {
      const std::size_t i = find(l[1], {Act::kRecvActivation, 0, 0, 0});
      std::swap(l[1][i], l[1][i + 1]);
    });
    const std::string p = s.find_problem();
    EXPECT_HAS(p, "pp rank 1, action 0 (F0@s1)");
    EXPECT_HAS(p, "the activation of micro-batch 0 from stage 0 is not here: no receive of it comes before");
    EXPECT_HAS(message_of([&] { s.validate(); }), "1f1b schedule (2 pp ranks, 4 micro-batches, 1 virtual) is unsound");
  }
  // Drop the last send: the receiver waits forever. Drop an earlier one: the receiver gets the next micro-batch.
  {
    const PipelineSchedule s = edited([&](auto& l) {
      l[0].erase(l[0].begin() + static_cast<std::ptrdiff_t>(find(l[0], {Act::kSendActivation, 3, 0, 1})));
    });
    const std::string p = s.find_problem();
    // Every stuck rank is named: rank 1 misses the activation, so rank 0 in turn misses its gradient.
    EXPECT_HAS(p, "deadlock: pp rank 0, action 13 (recv grad 3@s1 <- pp 1) waits for a send from pp rank 1");
    EXPECT_HAS(p, "; pp rank 1, action 12 (recv act 3@s0 <- pp 0) waits for a send from pp rank 0 that never comes");
    const PipelineSchedule t = edited([&](auto& l) {
      l[0].erase(l[0].begin() + static_cast<std::ptrdiff_t>(find(l[0], {Act::kSendActivation, 2, 0, 1})));
    });
    EXPECT_HAS(t.find_problem(),
               "pp rank 1, action 8 (recv act 2@s0 <- pp 0): the next activation from pp rank 0 is "
               "3@s0 (transfers match in FIFO order)");
  }
  // Swap two forwards on the first stage: the sends leave out of order, the second stage's receive gets the wrong one.
  {
    const PipelineSchedule s = edited([&](auto& l) {
      std::swap(l[0][find(l[0], {Act::kForward, 0, 0, -1})], l[0][find(l[0], {Act::kForward, 1, 0, -1})]);
      std::swap(l[0][find(l[0], {Act::kSendActivation, 0, 0, 1})], l[0][find(l[0], {Act::kSendActivation, 1, 0, 1})]);
    });
    EXPECT_HAS(s.find_problem(),
               "pp rank 1, action 0 (recv act 0@s0 <- pp 0): the next activation from pp rank 0 is "
               "1@s0 (transfers match in FIFO order)");
  }
  // A cycle: rank 0 waits for a gradient before sending the activations that would produce it.
  {
    const PipelineSchedule s = edited([&](auto& l) {
      const std::size_t i = find(l[0], {Act::kRecvGrad, 0, 1, 1});
      const PipelineAction a = l[0][i];
      l[0].erase(l[0].begin() + static_cast<std::ptrdiff_t>(i));
      l[0].insert(l[0].begin(), a);
    });
    const std::string p = s.find_problem();
    EXPECT_HAS(p, "deadlock: pp rank 0, action 0 (recv grad 0@s1 <- pp 1) waits for a send from pp rank 1");
    EXPECT_HAS(p, "pp rank 1, action 0 (recv act 0@s0 <- pp 0) waits for a send from pp rank 0");
  }
  // A backward before its forward, a forward twice, a stage on the wrong rank, a missing backward, a wrong peer.
  {
    const PipelineSchedule s = edited([&](auto& l) { l[1].insert(l[1].begin(), {Act::kBackward, 3, 1, -1}); });
    EXPECT_HAS(s.find_problem(), "pp rank 1, action 0 (B3@s1): micro-batch 3 has not been forwarded on stage 1");
  }
  {
    const PipelineSchedule s = edited([&](auto& l) { l[0].insert(l[0].begin() + 1, {Act::kForward, 0, 0, -1}); });
    EXPECT_HAS(s.find_problem(), "pp rank 0, action 1 (F0@s0): micro-batch 0 is forwarded twice on stage 0");
  }
  {
    const PipelineSchedule s = edited([&](auto& l) { l[0].push_back({Act::kForward, 0, 1, -1}); });
    EXPECT_HAS(s.find_problem(), "stage 1 lives on pp rank 1");
  }
  {
    const PipelineSchedule s = edited([&](auto& l) {
      l[0].erase(l[0].begin() + static_cast<std::ptrdiff_t>(find(l[0], {Act::kBackward, 3, 0, -1})));
    });
    EXPECT_HAS(s.find_problem(), "micro-batch 3 is never backwarded on stage 0 (pp rank 0)");
  }
  {
    const PipelineSchedule s = edited([&](auto& l) { l[0][find(l[0], {Act::kSendActivation, 1, 0, 1})].peer = 0; });
    EXPECT_HAS(s.find_problem(), "the activation of stage 0 goes to pp rank 1, not 0");
  }
  // A send nobody receives.
  {
    const PipelineSchedule s = edited([&](auto& l) {
      l[1].erase(l[1].begin() + static_cast<std::ptrdiff_t>(find(l[1], {Act::kRecvActivation, 3, 0, 0})));
      l[1].erase(l[1].begin() + static_cast<std::ptrdiff_t>(find(l[1], {Act::kForward, 3, 1, -1})));
    });
    EXPECT_FALSE(s.find_problem().empty());
  }
  // Interleaved: moving a chunk-1 forward ahead of the chunk-0 forward that feeds it (through rank 1) deadlocks.
  {
    const PipelineSchedule il = PipelineSchedule::build(Kind::kInterleaved, 2, 4, 2);
    auto lists = il.all_actions();
    auto& l0 = lists[0];
    const std::size_t recv = find(l0, {Act::kRecvActivation, 0, 1, 1});
    std::rotate(l0.begin(), l0.begin() + static_cast<std::ptrdiff_t>(recv),
                l0.begin() + static_cast<std::ptrdiff_t>(recv + 3));  // recv, F0@s2, send now come first
    const std::string p = PipelineSchedule(Kind::kInterleaved, 2, 4, 2, lists).find_problem();
    EXPECT_HAS(p, "deadlock: pp rank 0, action 0 (recv act 0@s1 <- pp 1)");
  }
}

// The documented order of rank r's forwards and backwards, as (kind, micro-batch, stage), computed apart from build().
std::vector<std::tuple<Act, int, int>> documented_computes(const Config& c, int r) {
  std::vector<std::tuple<Act, int, int>> out;
  auto f = [&](int mb, int s) { out.push_back({Act::kForward, mb, s}); };
  auto b = [&](int mb, int s) { out.push_back({Act::kBackward, mb, s}); };
  if (c.kind == Kind::kGPipe) {
    for (int mb = 0; mb < c.M; ++mb) f(mb, r);
    for (int mb = 0; mb < c.M; ++mb) b(mb, r);
  } else if (c.kind == Kind::kOneFOneB) {
    const int w = std::min(c.P - r - 1, c.M);
    for (int mb = 0; mb < w; ++mb) f(mb, r);
    for (int i = 0; i < c.M - w; ++i) f(w + i, r), b(i, r);
    for (int mb = c.M - w; mb < c.M; ++mb) b(mb, r);
  } else {
    // Megatron-LM: the k-th forward of a rank is micro-batch (k / PV) P + k % P on chunk (k % PV) / P; backwards run
    // the chunks in reverse.
    const int PV = c.P * c.V, total = c.M * c.V, w = interleaved_warmup(c.P, c.M, c.V, r);
    auto mb = [&](int k) { return (k / PV) * c.P + k % c.P; };
    auto fs = [&](int k) { return (k % PV) / c.P * c.P + r; };
    auto bs = [&](int k) { return (c.V - 1 - (k % PV) / c.P) * c.P + r; };
    for (int k = 0; k < w; ++k) f(mb(k), fs(k));
    for (int k = 0; k < total - w; ++k) f(mb(w + k), fs(w + k)), b(mb(k), bs(k));
    for (int k = total - w; k < total; ++k) b(mb(k), bs(k));
  }
  return out;
}

// Every schedule build() makes over the range completes under rendezvous steps, keeps the documented order of
// forwards and backwards and the closed-form bubble, and steps() / max_in_flight() agree with the list and simulate().
TEST(PipelineSchedule, EveryBuiltScheduleIsSoundWithRendezvousSteps) {
  std::vector<Config> all;
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 16; ++M) {
      all.push_back({Kind::kGPipe, P, M, 1});
      if (M >= P) all.push_back({Kind::kOneFOneB, P, M, 1});
    }
    for (int V = 2; V <= 4; ++V)
      for (int M = P; M <= 16; M += P) all.push_back({Kind::kInterleaved, P, M, V});
  }
  int checked = 0;
  for (const Config& c : all) {
    SCOPED_TRACE(name(c));
    const PipelineSchedule sched = PipelineSchedule::build(c.kind, c.P, c.M, c.V);
    const std::string problem = sched.find_problem();
    EXPECT_EQ(problem, "");
    if (!problem.empty()) continue;
    const PipelineTimeline tl = sched.simulate(1, 2);
    const int units = c.kind == Kind::kInterleaved ? c.V * c.M : c.M;  // chunk forwards per rank
    EXPECT_EQ(tl.makespan, 3L * (units + c.P - 1));
    EXPECT_DOUBLE_EQ(tl.bubble_fraction(), double(c.P - 1) / double(units + c.P - 1));
    for (int r = 0; r < c.P; ++r) {
      EXPECT_EQ(sched.max_in_flight(r), tl.max_in_flight[static_cast<std::size_t>(r)]) << "rank " << r;
      std::vector<std::tuple<Act, int, int>> computes;
      for (const PipelineAction& a : sched.actions(r))
        if (a.kind == Act::kForward || a.kind == Act::kBackward)
          computes.push_back({a.kind, a.micro_batch, a.virtual_stage});
      EXPECT_TRUE(computes == documented_computes(c, r)) << "rank " << r << ": forwards and backwards out of order";
      // The steps partition the list: compute steps hold one forward or backward, transfer steps maximal runs.
      std::vector<PipelineAction> joined;
      bool last_transfer = false;
      for (const PipelineStep& st : sched.steps(r)) {
        EXPECT_EQ(st.first, static_cast<int>(joined.size()));
        ASSERT_FALSE(st.actions.empty());
        if (st.transfer) {
          EXPECT_FALSE(last_transfer) << "two transfer steps in a row at action " << st.first;
          for (const PipelineAction& a : st.actions)
            EXPECT_TRUE(a.kind != Act::kForward && a.kind != Act::kBackward) << a.describe();
        } else {
          EXPECT_EQ(st.actions.size(), 1u);
          EXPECT_TRUE(st.actions[0].kind == Act::kForward || st.actions[0].kind == Act::kBackward);
        }
        last_transfer = st.transfer;
        joined.insert(joined.end(), st.actions.begin(), st.actions.end());
      }
      EXPECT_EQ(joined, sched.actions(r));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 354);  // 128 gpipe, 100 1f1b, 126 interleaved
}

// Sound with buffered sends, a deadlock with rendezvous steps: rank 0 runs GPipe, rank 1 starts its backwards after two
// forwards. Each rank has a send step, a compute, then a step with the receive the other one waits on: rank 0 posts
// [send act 2] before F3 and [send act 3, recv grad 0]; rank 1 posts [send grad 0] before B1 and [send grad 1, recv
// act 2]. With buffered sends both move past their send and all goes through; with rendezvous each send waits for a
// receive the other rank posts only after its own send has completed.
TEST(PipelineSchedule, SendAndReceiveInSeparateStepsDeadlock) {
  auto F = [](int mb, int s) { return PipelineAction{Act::kForward, mb, s, -1}; };
  auto B = [](int mb, int s) { return PipelineAction{Act::kBackward, mb, s, -1}; };
  auto sa = [](int mb) { return PipelineAction{Act::kSendActivation, mb, 0, 1}; };
  auto ra = [](int mb) { return PipelineAction{Act::kRecvActivation, mb, 0, 0}; };
  auto sg = [](int mb) { return PipelineAction{Act::kSendGrad, mb, 1, 0}; };
  auto rg = [](int mb) { return PipelineAction{Act::kRecvGrad, mb, 1, 1}; };
  std::vector<std::vector<PipelineAction>> lists = {{F(0, 0), sa(0), F(1, 0), sa(1), F(2, 0), sa(2), F(3, 0), sa(3),
                                                     rg(0), B(0, 0), rg(1), B(1, 0), rg(2), B(2, 0), rg(3), B(3, 0)},
                                                    {ra(0), F(0, 1), ra(1), F(1, 1), B(0, 1), sg(0), B(1, 1), sg(1),
                                                     ra(2), F(2, 1), B(2, 1), sg(2), ra(3), F(3, 1), B(3, 1), sg(3)}};
  const PipelineSchedule bad(Kind::kGPipe, 2, 4, 1, lists);
  const std::string p = bad.find_problem();
  EXPECT_HAS(p,
             "deadlock: pp rank 0, action 5 (send act 2@s0 -> pp 1) waits for a receive on pp rank 1 that never "
             "comes (pp rank 1 posts it at its action 8, but its step at action 5 never completes)");
  EXPECT_HAS(p,
             "; pp rank 1, action 5 (send grad 0@s1 -> pp 0) waits for a receive on pp rank 0 that never comes (pp "
             "rank 0 posts it at its action 8, but its step at action 5 never completes)");
  EXPECT_HAS(message_of([&] { bad.validate(); }), "gpipe schedule (2 pp ranks, 4 micro-batches, 1 virtual) is unsound");
  // The steps the runtime would issue on rank 1: the send of gradient 0 alone, then gradient 1's send with the next
  // activation's receive.
  const std::vector<PipelineStep> steps = bad.steps(1);
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_TRUE(steps[5].transfer);
  EXPECT_EQ(steps[5].first, 5);
  EXPECT_EQ(steps[5].actions, (std::vector<PipelineAction>{sg(0)}));
  EXPECT_EQ(steps[7].first, 7);
  EXPECT_EQ(steps[7].actions, (std::vector<PipelineAction>{sg(1), ra(2)}));
  // Rank 1 running GPipe too (all forwards first) is sound: its receives of activations come before any send.
  lists[1] = PipelineSchedule::build(Kind::kGPipe, 2, 4).actions(1);
  EXPECT_EQ(PipelineSchedule(Kind::kGPipe, 2, 4, 1, lists).find_problem(), "");
  // A send whose receive is missing altogether.
  lists[1].erase(std::find(lists[1].begin(), lists[1].end(), ra(3)));
  lists[1].erase(std::find(lists[1].begin(), lists[1].end(), F(3, 1)));
  lists[1].erase(std::find(lists[1].begin(), lists[1].end(), B(3, 1)));
  lists[1].erase(std::find(lists[1].begin(), lists[1].end(), sg(3)));
  EXPECT_HAS(PipelineSchedule(Kind::kGPipe, 2, 4, 1, lists).find_problem(),
             "deadlock: pp rank 0, action 7 (send act 3@s0 -> pp 1) waits for a receive on pp rank 1 that never comes "
             "(pp rank 1 receives only 3 activations from pp rank 0)");
}

// max_in_flight() counts along the list: GPipe holds all M, 1F1B rank r min(P - r, M).
TEST(PipelineSchedule, MaxInFlightCountsAlongTheList) {
  const PipelineSchedule g = PipelineSchedule::build(Kind::kGPipe, 4, 6);
  const PipelineSchedule f = PipelineSchedule::build(Kind::kOneFOneB, 4, 6);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(g.max_in_flight(r), 6);
    EXPECT_EQ(f.max_in_flight(r), 4 - r);
  }
  EXPECT_EQ(PipelineSchedule::build(Kind::kInterleaved, 2, 4, 2).max_in_flight(0), interleaved_warmup(2, 4, 2, 0) + 1);
}

TEST(PipelineSchedule, ToStringListsEachRankOnOneLine) {
  const PipelineSchedule g = PipelineSchedule::build(Kind::kGPipe, 2, 2);
  EXPECT_EQ(g.to_string(),
            "gpipe: 2 pp ranks, 2 micro-batches (F/B mb@stage; sa/ra, sg/rg: send/recv activation, gradient; >to "
            "<from pp)\n"
            "pp 0: F0@s0 sa0@s0>1 F1@s0 sa1@s0>1 rg0@s1<1 B0@s0 rg1@s1<1 B1@s0\n"
            "pp 1: ra0@s0<0 F0@s1 ra1@s0<0 F1@s1 B0@s1 sg0@s1>0 B1@s1 sg1@s1>0");
  EXPECT_EQ((PipelineAction{Act::kRecvGrad, 3, 2, 1}.describe()), "recv grad 3@s2 <- pp 1");
  EXPECT_EQ((PipelineAction{Act::kForward, 3, 1, -1}.describe()), "F3@s1");
}

}  // namespace
}  // namespace strata
