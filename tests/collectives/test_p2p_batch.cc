// Batched point-to-point (Communicator::batch_send_recv) on the CPU backend: pairs in either order, rings, self
// exchange, interplay with single send / recv, validation and argument errors, exact data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::element;
using test::error_code_of;
using test::fill_verifiable;
using test::runtime;
using test::verifiable_int;

const DType kAllTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64};

// 0, 1, world-1, a prime, and a large count not divisible by world * 64.
std::vector<std::size_t> test_counts(int world) {
  std::vector<std::size_t> c = {0, 1, static_cast<std::size_t>(world - 1), 1009, 100003};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// A buffer of `count` elements: verifiable data of (seed, rank) to send, or a value no sender uses (0x7f bytes: huge
// or NaN in every dtype) to receive into, so that an element left unwritten shows.
Buffer outgoing(std::size_t count, DType t, int seed, int rank) {
  Buffer b = runtime().device().allocate(count * dtype_size(t), MemCategory::kOther);
  fill_verifiable(b.data(), count, t, seed, rank);
  return b;
}

Buffer incoming(std::size_t count, DType t) {
  Buffer b = runtime().device().allocate(count * dtype_size(t), MemCategory::kOther);
  if (count) std::memset(b.data(), 0x7f, count * dtype_size(t));
  return b;
}

// Elements of `got` that differ from what `sender` sent with `seed`; reports the first few.
int count_wrong(const Buffer& got, std::size_t count, DType t, int seed, int sender, const std::string& what) {
  int wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double g = element(got.data(), i, t), want = verifiable_int(seed, sender, i);
    if (g == want) continue;
    if (wrong < 3) ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << want;
    ++wrong;
  }
  return wrong;
}

std::string label(const char* test, DType t, std::size_t count) {
  return fmt::format("{} {} count {}", test, dtype_name(t), count);
}

// Pairs (0,1), (2,3), ... exchange in one batch each; an odd world's last rank sits out. `order` is which op each
// side posts first: 0 both send first, 1 both receive first, 2 the even rank sends first and the odd one receives
// first. Ungrouped, order 0 deadlocks NCCL and large MPI messages.
void check_pairwise(int order) {
  Communicator& world = runtime().world();
  int me = world.rank(), n = world.size(), peer = me ^ 1;
  if (peer >= n) return;
  auto stream = runtime().device().create_stream("p2p");
  bool send_first = order == 0 || (order == 2 && me % 2 == 0);
  for (DType t : kAllTypes) {
    for (std::size_t count : test_counts(n)) {
      Buffer mine = outgoing(count, t, 11, me);
      Buffer theirs = incoming(count, t);
      P2POp s = P2POp::send(mine.data(), count, t, peer);
      P2POp r = P2POp::recv(theirs.data(), count, t, peer);
      world.batch_send_recv(send_first ? std::vector<P2POp>{s, r} : std::vector<P2POp>{r, s}, *stream);
      stream->synchronize();
      EXPECT_EQ(count_wrong(theirs, count, t, 11, peer, label("pairwise", t, count)), 0) << "order " << order;
    }
  }
}

TEST(P2PBatch, PairsExchangeWhenBothSendFirst) { check_pairwise(0); }
TEST(P2PBatch, PairsExchangeWhenBothReceiveFirst) { check_pairwise(1); }
TEST(P2PBatch, PairsExchangeInOppositeOrders) { check_pairwise(2); }

// Every rank sends to rank+1 and receives from rank-1 in one batch; odd ranks post the recv first. At one rank the
// ring is an exchange with itself.
TEST(P2PBatch, Ring) {
  Communicator& world = runtime().world();
  int me = world.rank(), n = world.size();
  int to = (me + 1) % n, from = (me + n - 1) % n;
  auto stream = runtime().device().create_stream("p2p");
  for (DType t : kAllTypes) {
    for (std::size_t count : test_counts(n)) {
      Buffer mine = outgoing(count, t, 12, me);
      Buffer theirs = incoming(count, t);
      P2POp s = P2POp::send(mine.data(), count, t, to);
      P2POp r = P2POp::recv(theirs.data(), count, t, from);
      world.batch_send_recv(me % 2 == 0 ? std::vector<P2POp>{s, r} : std::vector<P2POp>{r, s}, *stream);
      stream->synchronize();
      EXPECT_EQ(count_wrong(theirs, count, t, 12, from, label("ring", t, count)), 0);
    }
  }
}

// Both neighbours at once (a halo exchange): two sends and two recvs per batch. At two ranks both neighbours are
// one peer, so the k-th send to it must land in its k-th recv from us; at one rank all four ops are with self.
TEST(P2PBatch, BothNeighboursInOneBatch) {
  Communicator& world = runtime().world();
  int me = world.rank(), n = world.size();
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  auto stream = runtime().device().create_stream("p2p");
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64}) {
    for (std::size_t count : test_counts(n)) {
      Buffer to_next = outgoing(count, t, 13, me);
      Buffer to_prev = outgoing(count, t, 14, me);
      Buffer from_prev = incoming(count, t);
      Buffer from_next = incoming(count, t);
      world.batch_send_recv(
          {P2POp::recv(from_prev.data(), count, t, prev), P2POp::send(to_next.data(), count, t, next),
           P2POp::send(to_prev.data(), count, t, prev), P2POp::recv(from_next.data(), count, t, next)},
          *stream);
      stream->synchronize();
      EXPECT_EQ(count_wrong(from_prev, count, t, 13, prev, label("from prev", t, count)), 0);
      EXPECT_EQ(count_wrong(from_next, count, t, 14, next, label("from next", t, count)), 0);
    }
  }
}

TEST(P2PBatch, SelfExchange) {
  Communicator& world = runtime().world();
  int me = world.rank();
  auto stream = runtime().device().create_stream("p2p");
  for (bool recv_first : {false, true}) {
    for (DType t : kAllTypes) {
      for (std::size_t count : test_counts(world.size())) {
        Buffer mine = outgoing(count, t, 15, me);
        Buffer back = incoming(count, t);
        P2POp s = P2POp::send(mine.data(), count, t, me);
        P2POp r = P2POp::recv(back.data(), count, t, me);
        world.batch_send_recv(recv_first ? std::vector<P2POp>{r, s} : std::vector<P2POp>{s, r}, *stream);
        stream->synchronize();
        EXPECT_EQ(count_wrong(back, count, t, 15, me, label("self", t, count)), 0) << "recv first " << recv_first;
      }
    }
  }
}

// A single send pairs with a batched recv and a batched send with a single recv (data and validation headers share
// the per-peer numbering). The single ops run one after the other on one stream: the batch on the other side holds
// both directions posted, so neither waits for the other.
TEST(P2PBatch, InteroperatesWithSingleSendRecv) {
  Communicator& world = runtime().world();
  int me = world.rank(), n = world.size(), peer = me ^ 1;
  if (peer >= n) return;
  auto stream = runtime().device().create_stream("p2p");
  for (int batched_rank : {0, 1}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kI32}) {
      for (std::size_t count : test_counts(n)) {
        Buffer mine = outgoing(count, t, 16, me);
        Buffer theirs = incoming(count, t);
        if (me % 2 == batched_rank) {
          world.batch_send_recv({P2POp::recv(theirs.data(), count, t, peer), P2POp::send(mine.data(), count, t, peer)},
                                *stream);
        } else {
          world.send(mine.data(), count, t, peer, *stream);
          world.recv(theirs.data(), count, t, peer, *stream);
        }
        stream->synchronize();
        EXPECT_EQ(count_wrong(theirs, count, t, 16, peer, label("single and batched", t, count)), 0)
            << "batched on the " << (batched_rank == 0 ? "even" : "odd") << " rank";
      }
    }
  }
}

// An empty batch does nothing, on every rank, with no peer involved.
TEST(P2PBatch, EmptyBatchIsANoOp) {
  auto stream = runtime().device().create_stream("p2p");
  runtime().world().batch_send_recv({}, *stream);
  stream->synchronize();
}

// Rejected on the calling thread before any op is numbered: a valid exchange afterwards still pairs (in validation
// mode a skipped sequence number would show as a mismatch).
TEST(P2PBatch, RejectsBadArguments) {
  Communicator& world = runtime().world();
  int me = world.rank(), n = world.size();
  auto stream = runtime().device().create_stream("p2p");
  Buffer a = outgoing(8, DType::kF32, 17, me);
  Buffer b = incoming(8, DType::kF32);
  auto code_of = [&](std::vector<P2POp> ops) { return error_code_of([&] { world.batch_send_recv(ops, *stream); }); };
  auto message_of = [&](std::vector<P2POp> ops) {
    try {
      world.batch_send_recv(ops, *stream);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  int ok_peer = (me + 1) % n;
  EXPECT_EQ(code_of({P2POp::send(a.data(), 8, DType::kF32, n)}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({P2POp::recv(b.data(), 8, DType::kF32, -1)}), ErrorCode::kInvalidArgument);
  std::string out_of_range =
      message_of({P2POp::recv(b.data(), 8, DType::kF32, ok_peer), P2POp::send(a.data(), 8, DType::kF32, n)});
  EXPECT_NE(out_of_range.find(fmt::format("op 1 (send) names peer {} outside [0, {})", n, n)), std::string::npos)
      << out_of_range;
  P2POp not_p2p = P2POp::send(a.data(), 8, DType::kF32, ok_peer);
  not_p2p.kind = OpKind::kAllReduce;
  EXPECT_EQ(code_of({not_p2p}), ErrorCode::kInvalidArgument);
  std::string kind = message_of({not_p2p});
  EXPECT_NE(kind.find("op 0 is all_reduce, but a batch holds only send and recv"), std::string::npos) << kind;
  EXPECT_EQ(code_of({P2POp::send(nullptr, 8, DType::kF32, ok_peer)}), ErrorCode::kInvalidArgument);
  // Self: a send without its recv, a recv without its send, and a pair that disagrees on count or dtype.
  std::string unmatched = message_of({P2POp::send(a.data(), 8, DType::kF32, me)});
  EXPECT_NE(unmatched.find("sends to itself 1 times but receives from itself 0 times"), std::string::npos) << unmatched;
  EXPECT_EQ(code_of({P2POp::send(a.data(), 8, DType::kF32, me)}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({P2POp::recv(b.data(), 8, DType::kF32, me)}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({P2POp::send(a.data(), 8, DType::kF32, me), P2POp::recv(b.data(), 4, DType::kF32, me)}),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({P2POp::send(a.data(), 4, DType::kF32, me), P2POp::recv(b.data(), 4, DType::kI32, me)}),
            ErrorCode::kInvalidArgument);
  // Nothing was numbered: a ring still pairs.
  int from = (me + n - 1) % n;
  world.batch_send_recv({P2POp::send(a.data(), 8, DType::kF32, ok_peer), P2POp::recv(b.data(), 8, DType::kF32, from)},
                        *stream);
  stream->synchronize();
  EXPECT_EQ(count_wrong(b, 8, DType::kF32, 17, from, "ring after rejected batches"), 0);
}

// Under validation a pair that disagrees on a count fails on both sides with both calls named; the pair's other op,
// which matches, still runs, and the communicator stays in step.
TEST(P2PBatch, ValidationCatchesCountMismatchOnBothSides) {
  Communicator& world = runtime().world();
  ASSERT_TRUE(world.options().validate) << "tests run with STRATA_VALIDATE=1";
  int me = world.rank(), n = world.size(), peer = me ^ 1;
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  auto stream = runtime().device().create_stream("p2p");
  if (peer < n) {
    bool even = me % 2 == 0;
    Buffer big = outgoing(9, DType::kF32, 18, me);
    Buffer mine = outgoing(5, DType::kI32, 19, me);
    Buffer theirs = incoming(5, DType::kI32);
    // The even rank sends 8 elements, the odd one expects 9.
    P2POp mismatched =
        even ? P2POp::send(big.data(), 8, DType::kF32, peer) : P2POp::recv(big.data(), 9, DType::kF32, peer);
    world.batch_send_recv(
        {mismatched, P2POp::send(mine.data(), 5, DType::kI32, peer), P2POp::recv(theirs.data(), 5, DType::kI32, peer)},
        *stream);
    std::string message;
    ErrorCode code = ErrorCode::kInternal;
    try {
      stream->synchronize();
    } catch (const Error& e) {
      message = e.what();
      code = e.code();
    }
    EXPECT_EQ(code, ErrorCode::kMismatch) << message;
    EXPECT_NE(message.find(fmt::format("[rank {}/{}]", me, n)), std::string::npos) << message;
    EXPECT_NE(message.find("point-to-point mismatch in group 'world'"), std::string::npos) << message;
    EXPECT_NE(message.find(fmt::format("rank {} called {} seq=", me, even ? "send" : "recv")), std::string::npos)
        << message;
    EXPECT_NE(message.find(fmt::format("peer rank {} called {} seq=", peer, even ? "recv" : "send")), std::string::npos)
        << message;
    EXPECT_NE(message.find(even ? "count=8" : "count=9"), std::string::npos) << message;
    EXPECT_NE(message.find("(count differs)"), std::string::npos) << message;
    EXPECT_EQ(message.find("i32"), std::string::npos) << "only the mismatched op is named: " << message;
    EXPECT_EQ(count_wrong(theirs, 5, DType::kI32, 19, peer, "matching op beside a mismatch"), 0);
    // Still in step: the next exchange of the pair pairs.
    Buffer again = incoming(5, DType::kI32);
    world.batch_send_recv(
        {P2POp::send(mine.data(), 5, DType::kI32, peer), P2POp::recv(again.data(), 5, DType::kI32, peer)}, *stream);
    stream->synchronize();
    EXPECT_EQ(count_wrong(again, 5, DType::kI32, 19, peer, "exchange after a mismatch"), 0);
  }
  // The world is still usable.
  Buffer one = runtime().device().allocate(4, MemCategory::kOther);
  *one.as<float>() = 1.0f;
  world.all_reduce(one.data(), one.data(), 1, DType::kF32, ReduceOp::kSum, *stream);
  stream->synchronize();
  EXPECT_EQ(*one.as<float>(), static_cast<float>(n));
}

// A mismatch with one peer does not strand another: rank 0 sends to ranks 1 and 2 in one batch, rank 1 disagrees on
// the count, rank 2 agrees and gets its data.
TEST(P2PBatch, MismatchWithOnePeerDoesNotStrandAnother) {
  Communicator& world = runtime().world();
  int me = world.rank(), n = world.size();
  if (n < 3) GTEST_SKIP() << "needs three ranks";
  auto stream = runtime().device().create_stream("p2p");
  Buffer a = outgoing(8, DType::kF64, 20, me);
  Buffer b = outgoing(8, DType::kF64, 21, me);
  Buffer got = incoming(8, DType::kF64);
  if (me == 0) {
    world.batch_send_recv({P2POp::send(a.data(), 7, DType::kF64, 1), P2POp::send(b.data(), 8, DType::kF64, 2)},
                          *stream);
  } else if (me <= 2) {
    world.batch_send_recv({P2POp::recv(got.data(), 8, DType::kF64, 0)}, *stream);
  }
  std::optional<ErrorCode> code;
  try {
    stream->synchronize();
  } catch (const Error& e) {
    code = e.code();
  }
  if (me == 0 || me == 1) {
    EXPECT_EQ(code, ErrorCode::kMismatch);
  } else {
    EXPECT_FALSE(code.has_value());
  }
  if (me == 2) {
    EXPECT_EQ(count_wrong(got, 8, DType::kF64, 21, 0, "the agreeing peer"), 0);
  }
}

}  // namespace
}  // namespace strata
