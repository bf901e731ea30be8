// The MPI communicator's intra-node shared-memory path: on for groups on one node, bitwise equal to the MPI path on
// data whose sums round, and independent across lanes.
#include <gtest/gtest.h>
#include <unistd.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/mpi_communicator.h"
#include "collectives/shm_segment.h"
#include "core/env.h"
#include "core/shared_host_memory.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::fill_verifiable;
using test::runtime;
using test::verifiable_int;

const DType kAllTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

// Counts around the step size (ShmSegment::kPiece bytes): one element, an odd count, one just above the size from
// which shared inputs are read in place (ShmSegment::kDirectBytes; on the MPI path, still point to point), one
// exactly on a step boundary plus one, and one of more steps than a slot has buffers (so every buffer is reused).
std::vector<std::size_t> shm_counts(DType t, int world) {
  const std::size_t step = ShmSegment::kPiece / dtype_size(t), direct = ShmSegment::kDirectBytes / dtype_size(t);
  return {1, static_cast<std::size_t>(world) + 2, 1009, direct + 3, step + 1, (ShmSegment::kDepth + 1) * step + 13};
}

// A value that is not an integer, with exponents from 2^-10 to 2^9, so that the order of a float sum shows in its
// rounding (integers in [-1000, 1000] for the integer types).
double rough(int rank, std::size_t i) {
  std::uint64_t h = (static_cast<std::uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  double mantissa = static_cast<double>(h & 0xFFFFFF) / static_cast<double>(1 << 24) - 0.5;
  return std::ldexp(mantissa, static_cast<int>((h >> 24) % 20) - 10);
}

void fill_rough(void* dst, std::size_t count, DType t, int rank) {
  for (std::size_t i = 0; i < count; ++i) {
    double v = rough(rank, i);
    switch (t) {
      case DType::kF32: static_cast<float*>(dst)[i] = static_cast<float>(v); break;
      case DType::kBF16: static_cast<std::uint16_t*>(dst)[i] = f32_to_bf16(static_cast<float>(v)); break;
      case DType::kF16: static_cast<std::uint16_t*>(dst)[i] = f32_to_f16(static_cast<float>(v)); break;
      case DType::kI32: static_cast<std::int32_t*>(dst)[i] = static_cast<std::int32_t>(std::ldexp(v, 11)); break;
      case DType::kI64: static_cast<std::int64_t*>(dst)[i] = static_cast<std::int64_t>(std::ldexp(v, 11)); break;
      case DType::kF64: static_cast<double*>(dst)[i] = v; break;
    }
  }
}

CommOptions with_shm(bool on) {
  CommOptions o = CommOptions::from_env();
  o.shm = on;
  return o;
}

enum class Op { kAllGather, kReduceScatter, kAllReduce };

// Runs `op` on `comm` from identical rough inputs and returns the output bytes (collective).
// `shared`: the buffers in a category the CPU device puts in shared host memory, at least its minimum size, so
// inputs from ShmSegment::kDirectBytes are read where they lie; otherwise private, so every byte goes through the
// slots.
std::vector<char> run(Communicator& comm, Stream& stream, Op op, DType t, ReduceOp rop, std::size_t count,
                      bool in_place, bool shared = true) {
  Device& dev = comm.device();
  const std::size_t n = static_cast<std::size_t>(comm.size()), me = static_cast<std::size_t>(comm.rank());
  const std::size_t esz = dtype_size(t);
  const std::size_t in_elems = op == Op::kReduceScatter ? n * count : count;
  const std::size_t out_elems = op == Op::kAllGather ? n * count : count;
  const MemCategory category = shared ? MemCategory::kOther : MemCategory::kActivations;
  const std::size_t least = shared ? SharedHostMemory::kMinBytes : 0;
  Buffer in = dev.allocate(std::max({in_elems * esz, out_elems * esz, least}), category);
  Buffer out = dev.allocate(std::max(out_elems * esz, least), category);
  std::memset(out.data(), 0xab, out_elems * esz);
  char* send = in.as<char>();
  char* recv = out.as<char>();
  switch (op) {
    case Op::kAllGather:
      if (in_place) {
        send = recv + me * count * esz;
      }
      fill_rough(send, count, t, comm.rank());
      comm.all_gather(send, recv, count, t, stream);
      break;
    case Op::kReduceScatter:
      fill_rough(send, n * count, t, comm.rank());
      if (in_place) recv = send + me * count * esz;
      comm.reduce_scatter(send, recv, count, t, rop, stream);
      break;
    case Op::kAllReduce:
      fill_rough(send, count, t, comm.rank());
      if (in_place) recv = send;
      comm.all_reduce(send, recv, count, t, rop, stream);
      break;
  }
  stream.synchronize();
  return std::vector<char>(recv, recv + out_elems * esz);
}

const char* op_name(Op op) {
  return op == Op::kAllGather ? "all_gather" : op == Op::kReduceScatter ? "reduce_scatter" : "all_reduce";
}

TEST(ShmPath, OnForGroupsOnOneNodeUnlessDisabled) {
  const int n = runtime().world_size();
  MpiCommunicator on(runtime().device(), MPI_COMM_WORLD, "shm_on", with_shm(true));
  MpiCommunicator off(runtime().device(), MPI_COMM_WORLD, "shm_off", with_shm(false));
  // Tests run on one machine: every group of more than one rank is node-local.
  EXPECT_EQ(on.uses_shared_memory(), n > 1);
  EXPECT_FALSE(off.uses_shared_memory());
  auto* world = dynamic_cast<MpiCommunicator*>(&runtime().world());
  ASSERT_NE(world, nullptr);
  // The Runtime turns the path off for its communicators when the node runs more ranks than it has cores.
  const bool oversubscribed = n > sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_EQ(world->uses_shared_memory(), n > 1 && env().shm && !oversubscribed)
      << "STRATA_SHM=" << env().shm << ", " << n << " ranks on " << sysconf(_SC_NPROCESSORS_ONLN) << " cores";
}

// The shared-memory path against the MPI path on the same inputs: every byte equal, for every op, dtype and
// reduction, out of place and in place, at counts of one step, several steps and more steps than buffers. all_reduce
// runs its three ways: the whole buffer reduced on every rank (small), a reduce-scatter then an all-gather through
// the slots (private buffers from ShmSegment::kHalvesBytes), and inputs and outputs read in place (shared ones).
TEST(ShmPath, BitwiseEqualToMpiPath) {
  Device& dev = runtime().device();
  MpiCommunicator on(dev, MPI_COMM_WORLD, "shm_on", with_shm(true));
  MpiCommunicator off(dev, MPI_COMM_WORLD, "shm_off", with_shm(false));
  auto stream = dev.create_stream("comm");
  int differing = 0;
  for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllReduce}) {
    for (DType t : kAllTypes) {
      for (ReduceOp rop : kAllOps) {
        if (op == Op::kAllGather && rop != ReduceOp::kSum) continue;
        for (std::size_t count : shm_counts(t, on.size())) {
          for (bool in_place : {false, true}) {
            for (bool shared : {true, false}) {
              if (!shared && op != Op::kAllReduce) continue;
              std::vector<char> a = run(on, *stream, op, t, rop, count, in_place, shared);
              std::vector<char> b = run(off, *stream, op, t, rop, count, in_place, shared);
              bool same = a == b;
              if (!same && differing++ < 5)
                ADD_FAILURE() << op_name(op) << " " << dtype_name(t) << " " << reduce_op_name(rop) << " count "
                              << count << " in_place " << in_place << " shared " << shared
                              << ": the shared-memory path differs from the MPI path";
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(differing, 0);
}

// Two streams on one communicator are two lanes with segments of their own: operations on both at once neither
// block nor corrupt each other.
TEST(ShmPath, LanesOnTwoStreamsRunTogether) {
  Device& dev = runtime().device();
  Communicator& world = runtime().world();
  const int n = world.size(), me = world.rank();
  auto a = dev.create_stream("lane_a");
  auto b = dev.create_stream("lane_b");
  const std::size_t count = 3 * ShmSegment::kPiece / 4 + 5;  // f32: several steps
  Buffer ag_send = dev.allocate(count * 4, MemCategory::kOther);
  Buffer ag_recv = dev.allocate(n * count * 4, MemCategory::kOther);
  Buffer ar = dev.allocate(count * 4, MemCategory::kOther);
  int wrong = 0;
  for (int round = 0; round < 4; ++round) {
    fill_verifiable(ag_send.data(), count, DType::kF32, 10 + round, me);
    fill_verifiable(ar.data(), count, DType::kF32, 20 + round, me);
    world.all_gather(ag_send.data(), ag_recv.data(), count, DType::kF32, *a);
    world.all_reduce(ar.data(), ar.data(), count, DType::kF32, ReduceOp::kSum, *b);
    a->synchronize();
    b->synchronize();
    for (std::size_t i = 0; i < n * count; ++i)
      wrong += ag_recv.as<float>()[i] != static_cast<float>(verifiable_int(10 + round, int(i / count), i % count));
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>(verifiable_int(20 + round, r, i));
      wrong += ar.as<float>()[i] != want;
    }
  }
  EXPECT_EQ(wrong, 0);
}

// What the CPU device puts in shared host memory: buffers of at least SharedHostMemory::kMinBytes in a category
// that collectives read; never activations or optimizer state, never small buffers.
TEST(SharedHostMemory, HoldsWhatCollectivesReadAndFreesIt) {
  if (!env().shm || !env().shm_in_place) GTEST_SKIP() << "STRATA_SHM or STRATA_SHM_IN_PLACE 0: nothing is shared";
  Device& dev = runtime().device();
  const std::size_t big = SharedHostMemory::kMinBytes;
  const std::size_t before = SharedHostMemory::live_blocks();
  {
    Buffer grads = dev.allocate(big, MemCategory::kUnshardedGrads);
    Buffer params = dev.allocate(big + 3, MemCategory::kParamShard);
    Buffer small = dev.allocate(big - 1, MemCategory::kOther);
    Buffer acts = dev.allocate(big, MemCategory::kActivations);
    Buffer adam = dev.allocate(big, MemCategory::kOptimState);
    EXPECT_EQ(SharedHostMemory::live_blocks(), before + 2);
    auto ref = SharedHostMemory::find(params.as<char>() + 5, big - 2);
    ASSERT_TRUE(ref.has_value());
    EXPECT_EQ(ref->offset, 5u);
    EXPECT_EQ(ref->pid, getpid());
    EXPECT_GE(ref->block_bytes, big + 3);
    EXPECT_FALSE(SharedHostMemory::find(params.as<char>() + 5, ref->block_bytes).has_value());  // runs past the end
    EXPECT_TRUE(SharedHostMemory::find(grads.data(), big).has_value());
    EXPECT_FALSE(SharedHostMemory::find(small.data(), 1).has_value());
    EXPECT_FALSE(SharedHostMemory::find(acts.data(), 1).has_value());
    EXPECT_FALSE(SharedHostMemory::find(adam.data(), 1).has_value());
    std::memset(params.data(), 1, params.bytes());  // writable to its last byte
  }
  EXPECT_EQ(SharedHostMemory::live_blocks(), before);
}

// Exact all_gather and reduce_scatter results (integers in f32) with `send` and `recv` as given; `inputs` holds the
// send side (n * count floats), `outputs` the receive side.
int gather_and_scatter_wrong(MpiCommunicator& comm, Stream& s, float* inputs, float* outputs, std::size_t count,
                             int seed) {
  const int n = comm.size(), me = comm.rank();
  int wrong = 0;
  for (bool in_place : {false, true}) {
    float* send = in_place ? outputs + static_cast<std::size_t>(me) * count : inputs;
    fill_verifiable(send, count, DType::kF32, seed, me);
    comm.all_gather(send, outputs, count, DType::kF32, s);
    s.synchronize();
    for (std::size_t i = 0; i < static_cast<std::size_t>(n) * count; ++i)
      wrong += outputs[i] != static_cast<float>(verifiable_int(seed, static_cast<int>(i / count), i % count));
    fill_verifiable(inputs, static_cast<std::size_t>(n) * count, DType::kF32, seed + 1, me);
    float* recv = in_place ? inputs + static_cast<std::size_t>(me) * count : outputs;
    comm.reduce_scatter(inputs, recv, count, DType::kF32, ReduceOp::kSum, s);
    s.synchronize();
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r)
        want += static_cast<float>(verifiable_int(seed + 1, r, static_cast<std::size_t>(me) * count + i));
      wrong += recv[i] != want;
    }
  }
  return wrong;
}

// Why `comm` cannot read its peers' buffers in place (for a test's skip), or nullptr when it can.
const char* no_direct_path(const Communicator& comm) {
  const bool direct = comm.size() > 1 && env().shm && env().shm_in_place;
  return direct ? nullptr : "one rank, or STRATA_SHM or STRATA_SHM_IN_PLACE 0";
}

// Inputs in shared host memory are read where they lie (one copy); the results are exact, in place and out of place,
// with fresh buffers every round (a peer's freed block must not be read through a stale mapping: its descriptor
// number comes back for the next block), and more rounds than PeerBlocks keeps mappings.
TEST(ShmPath, ReadsSharedInputsInPlace) {
  Device& dev = runtime().device();
  MpiCommunicator comm(dev, MPI_COMM_WORLD, "shm_direct", with_shm(true));
  if (const char* why = no_direct_path(comm)) GTEST_SKIP() << why;
  auto s = dev.create_stream("direct");
  const std::size_t n = static_cast<std::size_t>(comm.size());
  const std::size_t count = ShmSegment::kPiece + 77;  // f32: four steps and a part, above SharedHostMemory::kMinBytes
  int wrong = 0;
  std::vector<Buffer> kept;  // every third round's buffers stay, so the mappings of several blocks stay in use
  for (int round = 0; round < static_cast<int>(PeerBlocks::kMaxPerPeer) + 8; ++round) {
    Buffer in = dev.allocate(n * count * 4, MemCategory::kUnshardedGrads);
    Buffer out = dev.allocate(n * count * 4, MemCategory::kUnshardedParams);
    wrong += gather_and_scatter_wrong(comm, *s, in.as<float>(), out.as<float>(), count, 100 + 2 * round);
    if (round % 3 == 0) {
      kept.push_back(std::move(in));
      kept.push_back(std::move(out));
    }
  }
  EXPECT_EQ(wrong, 0);
  // Four operations a round, every one direct.
  EXPECT_EQ(comm.shm_direct_operations(), 4u * (PeerBlocks::kMaxPerPeer + 8));
}

// An all_reduce whose input and output lie in shared host memory on every rank reads its peers' buffers in place:
// exact sums, in place and out of place, at a count that does not divide by the ranks; one rank with a private
// output sends every rank through the slots, with the same results.
TEST(ShmPath, AllReduceReadsSharedBuffersInPlace) {
  Device& dev = runtime().device();
  MpiCommunicator comm(dev, MPI_COMM_WORLD, "shm_ar_direct", with_shm(true));
  if (const char* why = no_direct_path(comm)) GTEST_SKIP() << why;
  auto s = dev.create_stream("ar_direct");
  const int n = comm.size(), me = comm.rank();
  // f32, enough for the direct path (n * kPiece bytes) and for shared host memory
  const std::size_t count =
      std::max(static_cast<std::size_t>(n) * ShmSegment::kPiece, SharedHostMemory::kMinBytes) / 4 + 77;
  Buffer in = dev.allocate(count * 4, MemCategory::kUnshardedGrads);
  Buffer out = dev.allocate(count * 4, MemCategory::kUnshardedGrads);
  std::vector<float> private_out(count);
  int wrong = 0;
  auto check = [&](const float* got, int seed) {
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>(verifiable_int(seed, r, i));
      wrong += got[i] != want;
    }
  };
  int seed = 40;
  for (bool in_place : {false, true}) {
    fill_verifiable(in.data(), count, DType::kF32, seed, me);
    float* recv = in_place ? in.as<float>() : out.as<float>();
    comm.all_reduce(in.data(), recv, count, DType::kF32, ReduceOp::kSum, *s);
    s->synchronize();
    check(recv, seed++);
  }
  EXPECT_EQ(comm.shm_direct_operations(), 2u);
  fill_verifiable(in.data(), count, DType::kF32, seed, me);
  float* recv = me == n - 1 ? private_out.data() : out.as<float>();
  comm.all_reduce(in.data(), recv, count, DType::kF32, ReduceOp::kSum, *s);
  s->synchronize();
  check(recv, seed);
  EXPECT_EQ(comm.shm_direct_operations(), 2u);
  EXPECT_EQ(wrong, 0);
}

// One rank's input in private memory: every rank takes the slots, with exact results.
TEST(ShmPath, PrivateInputOnOneRankTakesTheSlots) {
  Device& dev = runtime().device();
  MpiCommunicator comm(dev, MPI_COMM_WORLD, "shm_mixed", with_shm(true));
  if (comm.size() == 1) GTEST_SKIP() << "one rank";
  auto s = dev.create_stream("mixed");
  const std::size_t n = static_cast<std::size_t>(comm.size());
  const std::size_t count = ShmSegment::kPiece + 77;
  Buffer in = dev.allocate(n * count * 4, MemCategory::kOther);
  Buffer out = dev.allocate(n * count * 4, MemCategory::kOther);
  std::vector<float> private_in(n * count), private_out(n * count);
  const bool last = comm.rank() == comm.size() - 1;
  EXPECT_EQ(gather_and_scatter_wrong(comm, *s, last ? private_in.data() : in.as<float>(),
                                     last ? private_out.data() : out.as<float>(), count, 7),
            0);
  EXPECT_EQ(comm.shm_direct_operations(), 0u);
}

}  // namespace
}  // namespace strata
