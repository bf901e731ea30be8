// Communicator tests on the CPU backend: every op x dtype x size on the world and on split groups, exact data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/communicator_registry.h"
#include "collectives/staged_communicator.h"
#include "core/env.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::element;
using test::fill_verifiable;
using test::runtime;
using test::verifiable_int;

const DType kAllTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

// Sizes every op is checked at: 0, 1, world-1, a prime, a large one not divisible by world * 64, and an odd one
// of more shared-memory steps than a slot has buffers (ShmSegment: 256 KiB per rank per step, 4 buffers) in every
// dtype.
std::vector<std::size_t> test_counts(int world) {
  std::vector<std::size_t> c = {0, 1, static_cast<std::size_t>(world - 1), 1009, 100003, 9 * 65536 + 13};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// The expected reduction of verifiable values, computed in the arithmetic the backends promise: integers exactly,
// floats summed in f32 in rank order, divided once for avg, rounded once to the storage type.
double expected_reduce(DType t, ReduceOp op, int seed, const std::vector<int>& ranks, std::size_t index) {
  if (t == DType::kI32 || t == DType::kI64) {
    long long acc = verifiable_int(seed, ranks[0], index);
    for (std::size_t k = 1; k < ranks.size(); ++k) {
      long long v = verifiable_int(seed, ranks[k], index);
      acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    if (op == ReduceOp::kAvg) acc /= static_cast<long long>(ranks.size());
    return static_cast<double>(acc);
  }
  if (t == DType::kF64) {
    double acc = verifiable_int(seed, ranks[0], index);
    for (std::size_t k = 1; k < ranks.size(); ++k) {
      double v = verifiable_int(seed, ranks[k], index);
      acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    return op == ReduceOp::kAvg ? acc / static_cast<double>(ranks.size()) : acc;
  }
  float acc = static_cast<float>(verifiable_int(seed, ranks[0], index));
  for (std::size_t k = 1; k < ranks.size(); ++k) {
    float v = static_cast<float>(verifiable_int(seed, ranks[k], index));
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc /= static_cast<float>(ranks.size());
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(acc));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(acc));
  return acc;
}

// Counts mismatches between a host buffer and expected(i); reports the first few.
template <typename Expected>
int count_wrong(const void* data, std::size_t n, DType t, Expected expected, const std::string& what) {
  int wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double got = element(data, i, t), want = expected(i);
    if (got != want && !(std::isnan(got) && std::isnan(want))) {
      if (wrong < 3) ADD_FAILURE() << what << ": element " << i << " is " << got << ", expected " << want;
      ++wrong;
    }
  }
  return wrong;
}

std::vector<int> iota_ranks(int n) {
  std::vector<int> r(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

// members[i] = world rank of group rank i
void check_all_gather(Communicator& comm, const std::vector<int>& members, bool in_place) {
  Device& dev = comm.device();
  auto stream = dev.create_stream("comm");
  int n = comm.size(), me = comm.rank();
  for (DType t : kAllTypes) {
    for (std::size_t count : test_counts(n)) {
      std::size_t esz = dtype_size(t);
      Buffer recv = dev.allocate(n * count * esz, MemCategory::kOther);
      Buffer send = dev.allocate(count * esz, MemCategory::kOther);
      const void* src = send.data();
      if (in_place) {
        src = recv.as<char>() + me * count * esz;
        fill_verifiable(recv.as<char>() + me * count * esz, count, t, 1, members[me]);
      } else {
        fill_verifiable(send.data(), count, t, 1, members[me]);
      }
      comm.all_gather(src, recv.data(), count, t, *stream);
      stream->synchronize();
      count_wrong(recv.data(), n * count, t,
                  [&](std::size_t i) { return double(verifiable_int(1, members[i / count], i % count)); },
                  fmt::format("all_gather {} count {} in_place {} group {}", dtype_name(t), count, in_place,
                              comm.name()));
    }
  }
}

void check_reduce_scatter(Communicator& comm, const std::vector<int>& members, bool in_place) {
  Device& dev = comm.device();
  auto stream = dev.create_stream("comm");
  int n = comm.size(), me = comm.rank();
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : test_counts(n)) {
        std::size_t esz = dtype_size(t);
        Buffer send = dev.allocate(n * count * esz, MemCategory::kOther);
        Buffer out = dev.allocate(count * esz, MemCategory::kOther);
        fill_verifiable(send.data(), n * count, t, 2, members[me]);
        void* recv = in_place ? send.as<char>() + me * count * esz : out.data();
        comm.reduce_scatter(send.data(), recv, count, t, op, *stream);
        stream->synchronize();
        count_wrong(recv, count, t,
                    [&](std::size_t i) { return expected_reduce(t, op, 2, members, me * count + i); },
                    fmt::format("reduce_scatter {} {} count {} in_place {} group {}", dtype_name(t),
                                reduce_op_name(op), count, in_place, comm.name()));
      }
    }
  }
}

void check_all_reduce(Communicator& comm, const std::vector<int>& members, bool in_place) {
  Device& dev = comm.device();
  auto stream = dev.create_stream("comm");
  int n = comm.size(), me = comm.rank();
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : test_counts(n)) {
        std::size_t esz = dtype_size(t);
        Buffer send = dev.allocate(count * esz, MemCategory::kOther);
        Buffer out = dev.allocate(count * esz, MemCategory::kOther);
        fill_verifiable(send.data(), count, t, 3, members[me]);
        void* recv = in_place ? send.data() : out.data();
        comm.all_reduce(send.data(), recv, count, t, op, *stream);
        stream->synchronize();
        count_wrong(recv, count, t, [&](std::size_t i) { return expected_reduce(t, op, 3, members, i); },
                    fmt::format("all_reduce {} {} count {} in_place {} group {}", dtype_name(t), reduce_op_name(op),
                                count, in_place, comm.name()));
      }
    }
  }
}

void check_broadcast(Communicator& comm, const std::vector<int>& members) {
  Device& dev = comm.device();
  auto stream = dev.create_stream("comm");
  int n = comm.size(), me = comm.rank();
  for (int root : {0, n - 1}) {
    for (DType t : kAllTypes) {
      for (std::size_t count : test_counts(n)) {
        std::size_t esz = dtype_size(t);
        Buffer send = dev.allocate(count * esz, MemCategory::kOther);
        Buffer recv = dev.allocate(count * esz, MemCategory::kOther);
        fill_verifiable(send.data(), count, t, 4, members[me]);
        if (count) std::memset(recv.data(), 0xff, count * esz);
        comm.broadcast(send.data(), recv.data(), count, t, root, *stream);
        stream->synchronize();
        count_wrong(recv.data(), count, t, [&](std::size_t i) { return double(verifiable_int(4, members[root], i)); },
                    fmt::format("broadcast {} root {} count {} group {}", dtype_name(t), root, count, comm.name()));
      }
    }
  }
}

// A ring: every rank sends to rank+1 and receives from rank-1, on two streams so neither blocks the other.
void check_send_recv(Communicator& comm, const std::vector<int>& members) {
  int n = comm.size(), me = comm.rank();
  if (n < 2) return;
  Device& dev = comm.device();
  auto send_stream = dev.create_stream("send");
  auto recv_stream = dev.create_stream("recv");
  for (DType t : kAllTypes) {
    for (std::size_t count : test_counts(n)) {
      std::size_t esz = dtype_size(t);
      Buffer send = dev.allocate(count * esz, MemCategory::kOther);
      Buffer recv = dev.allocate(count * esz, MemCategory::kOther);
      fill_verifiable(send.data(), count, t, 5, members[me]);
      int to = (me + 1) % n, from = (me + n - 1) % n;
      comm.send(send.data(), count, t, to, *send_stream);
      comm.recv(recv.data(), count, t, from, *recv_stream);
      send_stream->synchronize();
      recv_stream->synchronize();
      count_wrong(recv.data(), count, t, [&](std::size_t i) { return double(verifiable_int(5, members[from], i)); },
                  fmt::format("send/recv {} count {} group {}", dtype_name(t), count, comm.name()));
    }
  }
}

void check_everything(Communicator& comm, const std::vector<int>& members) {
  for (bool in_place : {false, true}) {
    check_all_gather(comm, members, in_place);
    check_reduce_scatter(comm, members, in_place);
    check_all_reduce(comm, members, in_place);
  }
  check_broadcast(comm, members);
  check_send_recv(comm, members);
  auto stream = comm.device().create_stream("barrier");
  comm.barrier(*stream);
  stream->synchronize();
}

TEST(Collectives, WorldEveryOpDtypeSize) {
  Communicator& world = runtime().world();
  EXPECT_EQ(world.rank(), runtime().rank());
  EXPECT_EQ(world.size(), runtime().world_size());
  // "mpi", or "mpi-staged" where STRATA_COMM=mpi-staged runs this suite through the staged communicator.
  EXPECT_STREQ(world.backend_name(), comm_backend_for(DeviceKind::kCpu, parse_comm_choice(env().comm)));
  check_everything(world, iota_ranks(world.size()));
}

// Sub-groups: even and odd ranks, ordered by descending world rank (key = -rank), as the data- and
// tensor-parallel groups of later layers are built.
TEST(Collectives, SplitGroupsEveryOpDtypeSize) {
  Communicator& world = runtime().world();
  int me = world.rank(), n = world.size();
  auto sub = world.split(me % 2, -me);
  ASSERT_NE(sub, nullptr);
  std::vector<int> members;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == me % 2) members.push_back(r);
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[static_cast<std::size_t>(sub->rank())], me);
  EXPECT_EQ(sub->name(), fmt::format("world/c{}", me % 2));
  check_everything(*sub, members);
}

TEST(Collectives, SplitWithNegativeColorOptsOut) {
  Communicator& world = runtime().world();
  int me = world.rank();
  auto sub = world.split(me == 0 ? -1 : 0, me);
  if (me == 0) {
    EXPECT_EQ(sub, nullptr);
  } else {
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), world.size() - 1);
    EXPECT_EQ(sub->rank(), me - 1);
  }
}

// Under validation, a rank that calls all_gather with a different count gets a clear error on every rank, naming
// the ranks that differ, instead of a hang or corrupted memory.
TEST(Collectives, ValidationCatchesCountMismatchOnEveryRank) {
  Communicator& world = runtime().world();
  ASSERT_TRUE(world.options().validate) << "tests run with STRATA_VALIDATE=1";
  int n = world.size(), me = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  auto stream = runtime().device().create_stream("comm");
  std::size_t count = me == n - 1 ? 9 : 8;
  Buffer send = runtime().device().allocate(9 * 4, MemCategory::kOther);
  Buffer recv = runtime().device().allocate(n * 9 * 4, MemCategory::kOther);
  world.all_gather(send.data(), recv.data(), count, DType::kF32, *stream);
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
  EXPECT_NE(message.find(fmt::format("ranks {} differ from rank 0 in count", n - 1)), std::string::npos) << message;
  EXPECT_NE(message.find("all_gather"), std::string::npos) << message;
  // The communicator stays usable: the lane saw the same validation exchange on every rank.
  Buffer one = runtime().device().allocate(4, MemCategory::kOther);
  *one.as<float>() = 1.0f;
  world.all_reduce(one.data(), one.data(), 1, DType::kF32, ReduceOp::kSum, *stream);
  stream->synchronize();
  EXPECT_EQ(*one.as<float>(), static_cast<float>(n));
}

TEST(Collectives, ValidationCatchesDtypeAndOpMismatch) {
  Communicator& world = runtime().world();
  int n = world.size(), me = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  auto stream = runtime().device().create_stream("comm");
  Buffer buf = runtime().device().allocate(n * 16 * 4, MemCategory::kOther);
  world.all_reduce(buf.data(), buf.data(), 4, me == 0 ? DType::kF32 : DType::kI32, ReduceOp::kSum, *stream);
  EXPECT_THROW(stream->synchronize(), Error);
  if (me == 0) world.all_gather(buf.data(), buf.data(), 4, DType::kF32, *stream);
  else world.reduce_scatter(buf.data(), buf.data(), 4, DType::kF32, ReduceOp::kSum, *stream);
  try {
    stream->synchronize();
    ADD_FAILURE() << "op mismatch not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differ from rank 0 in op"), std::string::npos) << e.what();
  }
}

TEST(Collectives, SequenceNumbersCountCollectives) {
  Communicator& world = runtime().world();
  auto stream = runtime().device().create_stream("comm");
  std::uint64_t before = world.sequence();
  world.barrier(*stream);
  world.barrier(*stream);
  stream->synchronize();
  EXPECT_EQ(world.sequence(), before + 2);
}

TEST(Collectives, CommBuffersAreInTheLedger) {
  Device& dev = runtime().device();
  Communicator& world = runtime().world();
  auto stream = dev.create_stream("comm");
  std::size_t n = static_cast<std::size_t>(world.size());
  // Under STRATA_COMM=mpi-staged the staging (here the same n * count * 4 bytes) is in the host ledger of the staged
  // communicator.
  auto* staged = dynamic_cast<StagedCommunicator*>(&world);
  const MemoryStats& ledger = staged ? staged->staging_device().memory_stats() : dev.memory_stats();
  std::size_t before = ledger.current(MemCategory::kCommBuffer);
  std::size_t count = 4096;
  Buffer send = dev.allocate(n * count * 4, MemCategory::kOther);
  Buffer recv = dev.allocate(count * 4, MemCategory::kOther);
  std::memset(send.data(), 0, send.bytes());
  world.reduce_scatter(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum, *stream);
  stream->synchronize();
  // A new stream means a new lane with its own staging: exactly n * count * 4 bytes for this reduce-scatter.
  EXPECT_EQ(ledger.current(MemCategory::kCommBuffer), before + n * count * 4);
}

}  // namespace
}  // namespace strata
