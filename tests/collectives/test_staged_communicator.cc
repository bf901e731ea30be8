// StagedCommunicator against MpiCommunicator in one process: the same operations on the same inputs give the same
// bytes (every op and dtype, in place and not, point to point, batches, a split child), on the shared-memory path and
// on MPI's; the staging is reused, not reallocated, once it has grown.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/mpi_communicator.h"
#include "collectives/staged_communicator.h"
#include "core/dtype.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

const DType kAllTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

// 0, 1, world-1, a prime (point to point below 64 KiB), and a count over every path's threshold.
std::vector<std::size_t> counts(int world) { return {0, 1, static_cast<std::size_t>(world - 1), 1009, 100003}; }

std::uint32_t mix(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  return x ^ (x >> 16);
}

// Values of (seed, rank, i) whose sums round differently in another order (mantissas of every length over 16 binary
// orders of magnitude), so that equal bytes mean the same reduction in the same order, not merely exact arithmetic.
void fill_rounding(void* dst, std::size_t count, DType t, int seed, int rank) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t h =
        mix(static_cast<std::uint32_t>(i) * 2654435761U ^ static_cast<std::uint32_t>(seed * 1000003 + rank * 7919));
    const int whole = static_cast<int>(h % 2001) - 1000;
    const float v = static_cast<float>(whole) / 7.0f * static_cast<float>(1 << ((h >> 12) % 16)) / 1024.0f;
    char* p = static_cast<char*>(dst) + i * dtype_size(t);
    switch (t) {
      case DType::kF32: std::memcpy(p, &v, 4); break;
      case DType::kBF16: {
        const std::uint16_t b = f32_to_bf16(v);
        std::memcpy(p, &b, 2);
        break;
      }
      case DType::kF16: {
        const std::uint16_t b = f32_to_f16(v);
        std::memcpy(p, &b, 2);
        break;
      }
      case DType::kI32: std::memcpy(p, &whole, 4); break;
      case DType::kI64: {
        const std::int64_t w = static_cast<std::int64_t>(whole) << 33;
        std::memcpy(p, &w, 8);
        break;
      }
      case DType::kF64: {
        const double d = static_cast<double>(v) / 3.0;
        std::memcpy(p, &d, 8);
        break;
      }
    }
  }
}

// The two communicators of one group, each with a stream of its own, and the buffers of one comparison.
class Pair {
 public:
  Pair(std::unique_ptr<Communicator> plain, std::unique_ptr<Communicator> staged)
      : plain_(std::move(plain)), staged_(std::move(staged)) {
    plain_stream_ = device().create_stream("plain");
    staged_stream_ = device().create_stream("staged");
  }
  Device& device() const { return runtime().device(); }
  Communicator& plain() { return *plain_; }
  Communicator& staged() { return *staged_; }
  int rank() const { return plain_->rank(); }
  int size() const { return plain_->size(); }

  // Runs op(comm, in, out, stream) on both communicators, each on its own copy of the same `in` (in_bytes, filled
  // with fill_rounding) and an output of out_bytes (0x5a bytes first), and expects the two outputs, and the two
  // inputs afterwards (in-place forms write them), bitwise equal.
  template <class Op>
  void compare(const std::string& what, std::size_t in_bytes, std::size_t out_bytes, DType t, int seed, Op op) {
    const std::size_t esz = dtype_size(t);
    std::vector<Buffer> in, out;
    for (int k = 0; k < 2; ++k) {
      in.push_back(device().allocate(in_bytes, MemCategory::kOther));
      out.push_back(device().allocate(out_bytes, MemCategory::kOther));
      fill_rounding(in.back().data(), in_bytes / esz, t, seed, plain_->world_ranks()[static_cast<std::size_t>(rank())]);
      if (out_bytes) std::memset(out.back().data(), 0x5a, out_bytes);
    }
    op(*plain_, in[0].as<char>(), out[0].as<char>(), *plain_stream_);
    op(*staged_, in[1].as<char>(), out[1].as<char>(), *staged_stream_);
    plain_stream_->synchronize();
    staged_stream_->synchronize();
    EXPECT_TRUE(out_bytes == 0 || std::memcmp(out[0].data(), out[1].data(), out_bytes) == 0) << what << ": outputs";
    EXPECT_TRUE(in_bytes == 0 || std::memcmp(in[0].data(), in[1].data(), in_bytes) == 0) << what << ": inputs";
  }

 private:
  std::unique_ptr<Communicator> plain_, staged_;
  std::unique_ptr<Stream> plain_stream_, staged_stream_;
};

std::string label(const char* op, DType t, std::size_t count, const char* form, const Communicator& comm) {
  return fmt::format("{} {} count {} {} group {}", op, dtype_name(t), count, form, comm.name());
}

void compare_collectives(Pair& pair) {
  const std::size_t n = static_cast<std::size_t>(pair.size()), me = static_cast<std::size_t>(pair.rank());
  for (DType t : kAllTypes) {
    const std::size_t esz = dtype_size(t);
    for (std::size_t count : counts(pair.size())) {
      const std::size_t bytes = count * esz;
      pair.compare(label("all_gather", t, count, "out of place", pair.plain()), bytes, n * bytes, t, 1,
                   [&](Communicator& c, char* in, char* out, Stream& s) { c.all_gather(in, out, count, t, s); });
      pair.compare(
          label("all_gather", t, count, "in place", pair.plain()), n * bytes, 0, t, 2,
          [&](Communicator& c, char* in, char*, Stream& s) { c.all_gather(in + me * bytes, in, count, t, s); });
      for (ReduceOp op : kAllOps) {
        pair.compare(
            label("reduce_scatter", t, count, reduce_op_name(op), pair.plain()), n * bytes, bytes, t, 3,
            [&](Communicator& c, char* in, char* out, Stream& s) { c.reduce_scatter(in, out, count, t, op, s); });
        pair.compare(label("reduce_scatter in place", t, count, reduce_op_name(op), pair.plain()), n * bytes, 0, t, 4,
                     [&](Communicator& c, char* in, char*, Stream& s) {
                       c.reduce_scatter(in, in + me * bytes, count, t, op, s);
                     });
        pair.compare(label("all_reduce", t, count, reduce_op_name(op), pair.plain()), bytes, bytes, t, 5,
                     [&](Communicator& c, char* in, char* out, Stream& s) { c.all_reduce(in, out, count, t, op, s); });
        pair.compare(label("all_reduce in place", t, count, reduce_op_name(op), pair.plain()), bytes, 0, t, 6,
                     [&](Communicator& c, char* in, char*, Stream& s) { c.all_reduce(in, in, count, t, op, s); });
      }
      for (int root : {0, pair.size() - 1}) {
        pair.compare(label("broadcast", t, count, root == 0 ? "root 0" : "root n-1", pair.plain()), bytes, bytes, t, 7,
                     [&](Communicator& c, char* in, char* out, Stream& s) { c.broadcast(in, out, count, t, root, s); });
        pair.compare(label("broadcast in place", t, count, root == 0 ? "root 0" : "root n-1", pair.plain()), bytes, 0,
                     t, 8,
                     [&](Communicator& c, char* in, char*, Stream& s) { c.broadcast(in, in, count, t, root, s); });
      }
    }
  }
}

// A ring by single send / recv (even ranks send first), then by one batch holding a send to self and its recv.
void compare_point_to_point(Pair& pair) {
  const int n = pair.size(), me = pair.rank();
  const int to = (me + 1) % n, from = (me + n - 1) % n;
  for (DType t : kAllTypes) {
    for (std::size_t count : counts(n)) {
      const std::size_t bytes = count * dtype_size(t);
      if (n > 1)
        pair.compare(label("send/recv", t, count, "ring", pair.plain()), bytes, bytes, t, 9,
                     [&](Communicator& c, char* in, char* out, Stream& s) {
                       if (me % 2 == 0) c.send(in, count, t, to, s);
                       c.recv(out, count, t, from, s);
                       if (me % 2 == 1) c.send(in, count, t, to, s);
                     });
      pair.compare(label("batch_send_recv", t, count, "ring and self", pair.plain()), bytes, 2 * bytes, t, 10,
                   [&](Communicator& c, char* in, char* out, Stream& s) {
                     c.batch_send_recv({P2POp::recv(out, count, t, from), P2POp::send(in, count, t, to),
                                        P2POp::send(in, count, t, me), P2POp::recv(out + bytes, count, t, me)},
                                       s);
                   });
    }
  }
}

std::unique_ptr<Pair> world_pair(bool shm) {
  CommOptions options = CommOptions::from_env();
  options.shm = shm;
  Device& dev = runtime().device();
  return std::make_unique<Pair>(std::make_unique<MpiCommunicator>(dev, MPI_COMM_WORLD, "plain", options),
                                std::make_unique<StagedCommunicator>(dev, MPI_COMM_WORLD, "staged", options));
}

TEST(StagedCommunicator, BitwiseEqualToMpiOnEveryOp) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared-memory path" : "MPI path");
    auto pair = world_pair(shm);
    EXPECT_STREQ(pair->staged().backend_name(), "mpi-staged");
    EXPECT_EQ(pair->staged().rank(), pair->plain().rank());
    EXPECT_EQ(pair->staged().size(), pair->plain().size());
    EXPECT_EQ(pair->staged().world_ranks(), pair->plain().world_ranks());
    compare_collectives(*pair);
    compare_point_to_point(*pair);
    auto barrier = runtime().device().create_stream("barrier");
    pair->plain().barrier(*barrier);
    pair->staged().barrier(*barrier);
    barrier->synchronize();
    EXPECT_EQ(pair->staged().sequence(), pair->plain().sequence());
  }
}

// A split child of the staged communicator is staged, named as MPI's, and equal to MPI's child bit for bit.
TEST(StagedCommunicator, SplitChildIsStagedAndEqual) {
  auto pair = world_pair(true);
  const int me = pair->rank();
  auto plain = pair->plain().split(me % 2, -me, "half");
  auto staged = pair->staged().split(me % 2, -me, "half");
  EXPECT_TRUE(plain && staged);
  if (plain && staged) {
    EXPECT_STREQ(staged->backend_name(), "mpi-staged");
    EXPECT_EQ(staged->name(), "staged/half");
    EXPECT_EQ(staged->rank(), plain->rank());
    EXPECT_EQ(staged->size(), plain->size());
    EXPECT_EQ(staged->world_ranks(), plain->world_ranks());
    Pair child(std::move(plain), std::move(staged));
    compare_collectives(child);
  }
  EXPECT_EQ(pair->staged().split(-1, me), nullptr);
  EXPECT_EQ(pair->plain().split(-1, me), nullptr);
}

// The staging is in the staging device's ledger (kCommBuffer), grows to the largest operation of a stream and is
// then reused: repeating the operations allocates nothing more.
TEST(StagedCommunicator, StagingGrowsOnceAndIsReused) {
  CommOptions options = CommOptions::from_env();
  Device& dev = runtime().device();
  StagedCommunicator staged(dev, MPI_COMM_WORLD, "staged", options);
  const MemoryStats& ledger = staged.staging_device().memory_stats();
  auto stream = dev.create_stream("comm");
  const std::size_t n = static_cast<std::size_t>(staged.size());
  Buffer send = dev.allocate(n * 4096 * 4, MemCategory::kOther);
  Buffer recv = dev.allocate(n * 4096 * 4, MemCategory::kOther);
  std::memset(send.data(), 0, send.bytes());
  auto round = [&] {
    for (std::size_t count : {std::size_t{16}, std::size_t{4096}, std::size_t{100}}) {
      staged.all_reduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum, *stream);
      staged.reduce_scatter(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum, *stream);
    }
    stream->synchronize();
  };
  round();
  round();  // its first operation gives back what the first round outgrew
  const std::size_t grown = ledger.current(MemCategory::kCommBuffer);
  const std::size_t allocations = ledger.allocations();
  round();
  round();
  // The largest operation is the reduce-scatter of 4096 floats per rank.
  EXPECT_EQ(grown, n * 4096 * 4);
  EXPECT_EQ(ledger.current(MemCategory::kCommBuffer), grown);
  EXPECT_EQ(ledger.allocations(), allocations);
}

}  // namespace
}  // namespace strata
