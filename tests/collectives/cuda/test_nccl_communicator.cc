// Tests of the CUDA device's communicator at any np: every op x dtype on exactly verifiable data, batched
// point-to-point, validation, streams and split. NcclCommunicator under STRATA_COMM=auto or nccl (one GPU per rank);
// the host-staged MPI communicator under STRATA_COMM=mpi, where the ranks may share one GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator_registry.h"
#include "core/device_registry.h"
#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::error_code_of;

constexpr double kTimeoutS = 120.0;
constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64};
constexpr double kSentinel = 99.0;  // what output buffers hold before an operation writes them

// Small integers (exact in every dtype, and so are their sums over up to 8 ranks); i64 adds a multiple of 2^36 so
// that the upper half of each word is exercised.
double value(int rank, std::size_t i, DType dtype) {
  double v = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 13) % 31) - 15.0;
  if (dtype == DType::kI64) v += 68719476736.0 * (rank + 1);
  return v;
}

// Rank-independent inputs, so that an average is exact.
double same_on_all_ranks(std::size_t i) { return static_cast<double>(i % 23) - 11.0; }

// The host image of `n` elements of `dtype`.
class HostArray {
 public:
  HostArray(DType dtype, std::size_t n) : dtype_(dtype), n_(n), bytes_(n * dtype_size(dtype)) {}
  HostArray(DType dtype, std::size_t n, const std::function<double(std::size_t)>& f) : HostArray(dtype, n) {
    for (std::size_t i = 0; i < n; ++i) set(i, f(i));
  }

  std::size_t size() const { return n_; }
  std::size_t bytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }

  void set(std::size_t i, double v) {
    unsigned char* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::kF32: store(p, static_cast<float>(v)); break;
      case DType::kBF16: store(p, f32_to_bf16(static_cast<float>(v))); break;
      case DType::kF16: store(p, f32_to_f16(static_cast<float>(v))); break;
      case DType::kI32: store(p, static_cast<std::int32_t>(v)); break;
      case DType::kI64: store(p, static_cast<std::int64_t>(v)); break;
      case DType::kF64: store(p, v); break;
    }
  }

  double get(std::size_t i) const {
    const unsigned char* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::kF32: return load<float>(p);
      case DType::kBF16: return bf16_to_f32(load<std::uint16_t>(p));
      case DType::kF16: return f16_to_f32(load<std::uint16_t>(p));
      case DType::kI32: return load<std::int32_t>(p);
      case DType::kI64: return static_cast<double>(load<std::int64_t>(p));
      case DType::kF64: return load<double>(p);
    }
    return NAN;
  }

 private:
  template <typename T>
  static void store(unsigned char* p, T v) {
    std::memcpy(p, &v, sizeof(T));
  }
  template <typename T>
  static T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }

  DType dtype_;
  std::size_t n_;
  std::vector<unsigned char> bytes_;
};

// Relative tolerance: 0 (exact) except for averages of floats, which NCCL computes with a pre-multiplication.
double tolerance(DType dtype, ReduceOp op) {
  if (op != ReduceOp::kAvg || !dtype_is_float(dtype)) return 0.0;
  if (dtype == DType::kF64) return 1e-12;
  return dtype == DType::kF32 ? 1e-6 : 1e-2;
}

double reduce(ReduceOp op, const std::vector<double>& values) {
  double sum = 0.0;
  double max = -INFINITY;
  for (double v : values) {
    sum += v;
    max = std::max(max, v);
  }
  if (op == ReduceOp::kMax) return max;
  if (op == ReduceOp::kAvg) return sum / static_cast<double>(values.size());
  return sum;
}

// Mismatching elements of `got` against `expected`, with the first one described in `first`.
std::size_t count_wrong(const HostArray& got, const std::function<double(std::size_t)>& expected, double rel_tol,
                        std::string* first) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = expected(i);
    double g = got.get(i);
    if (std::fabs(g - e) <= rel_tol * std::max(1.0, std::fabs(e))) continue;
    if (wrong++ == 0)
      *first = "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " + std::to_string(e);
  }
  return wrong;
}

std::string label(const char* op, DType dtype, std::size_t count) {
  return std::string(op) + " dtype=" + dtype_name(dtype) + " count=" + std::to_string(count);
}

// One GPU and one world communicator (validation on, STRATA_COMM's choice) shared by the tests of the suite.
class NcclCommunicatorTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    comm_.reset();
    device_.reset();
  }

  void SetUp() override {
    const int gpus = cuda_device_count();
    if (gpus == 0) GTEST_SKIP() << "no CUDA device visible";
    const int ranks = test::runtime().local_size();
    if (ranks > gpus && needs_gpu_per_rank(choice())) GTEST_SKIP() << nccl_gpu_shortage(ranks, gpus);
    if (!comm_) {
      device_ = create_device(DeviceKind::kCuda, test::runtime().local_rank() % gpus, kTimeoutS);
      CommOptions options;
      options.timeout_s = kTimeoutS;
      options.validate = true;
      comm_ = create_communicator(*device_, MPI_COMM_WORLD, "world", options, choice());
    }
  }

  static CommChoice choice() { return parse_comm_choice(env().comm); }
  // "nccl", or "mpi-staged" under STRATA_COMM=mpi.
  static const char* backend() { return comm_backend_for(DeviceKind::kCuda, choice()); }
  static bool on_nccl() { return std::string(backend()) == "nccl"; }

  Device& dev() { return *device_; }
  Communicator& comm() { return *comm_; }
  Stream& stream() { return device_->compute_stream(); }

  static std::vector<std::size_t> counts(int world) {
    return {0, 1, static_cast<std::size_t>(world - 1), 1009, (std::size_t{1} << 20) + 3};
  }

  Buffer upload(const HostArray& host) {
    Buffer b = dev().allocate(host.bytes(), MemCategory::kCommBuffer);
    dev().copy_from_host(b.data(), host.data(), host.bytes());
    return b;
  }

  HostArray download(const Buffer& b, DType dtype, std::size_t n) {
    HostArray host(dtype, n);
    dev().copy_to_host(host.data(), b.data(), host.bytes());
    return host;
  }

  static std::unique_ptr<Device> device_;
  static std::unique_ptr<Communicator> comm_;
};

std::unique_ptr<Device> NcclCommunicatorTest::device_;
std::unique_ptr<Communicator> NcclCommunicatorTest::comm_;

TEST_F(NcclCommunicatorTest, Identity) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm().rank(), rank);
  EXPECT_EQ(comm().size(), size);
  EXPECT_EQ(comm().name(), "world");
  EXPECT_STREQ(comm().backend_name(), backend());
  EXPECT_TRUE(comm().options().validate);
  EXPECT_EQ(&comm().device(), &dev());
}

TEST_F(NcclCommunicatorTest, AllGather) {
  const int rank = comm().rank();
  const int world = comm().size();
  for (DType dtype : kDTypes) {
    for (std::size_t count : counts(world)) {
      SCOPED_TRACE(label("all_gather", dtype, count));
      const std::size_t total = count * static_cast<std::size_t>(world);
      auto expected = [&](std::size_t j) { return value(static_cast<int>(j / count), j % count, dtype); };
      Buffer send = upload(HostArray(dtype, count, [&](std::size_t i) { return value(rank, i, dtype); }));
      Buffer recv = upload(HostArray(dtype, total, [](std::size_t) { return kSentinel; }));
      comm().all_gather(send.data(), recv.data(), count, dtype, stream());
      stream().synchronize();
      std::string first;
      EXPECT_EQ(count_wrong(download(recv, dtype, total), expected, 0.0, &first), 0u) << first;

      // In place: this rank's slice of the output is the input.
      HostArray start(dtype, total, [&](std::size_t j) {
        return static_cast<int>(j / std::max<std::size_t>(count, 1)) == rank ? value(rank, j % count, dtype)
                                                                             : kSentinel;
      });
      Buffer inplace = upload(start);
      const void* slice = inplace.as<unsigned char>() + static_cast<std::size_t>(rank) * count * dtype_size(dtype);
      comm().all_gather(count ? slice : nullptr, inplace.data(), count, dtype, stream());
      stream().synchronize();
      EXPECT_EQ(count_wrong(download(inplace, dtype, total), expected, 0.0, &first), 0u) << "in place: " << first;
    }
  }
}

TEST_F(NcclCommunicatorTest, ReduceScatter) {
  const int rank = comm().rank();
  const int world = comm().size();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
    for (DType dtype : kDTypes) {
      for (std::size_t count : counts(world)) {
        SCOPED_TRACE(label("reduce_scatter", dtype, count) + " op=" + reduce_op_name(op));
        const std::size_t total = count * static_cast<std::size_t>(world);
        auto input = [&](int r, std::size_t j) {
          return op == ReduceOp::kAvg ? same_on_all_ranks(j) : value(r, j, dtype);
        };
        auto expected = [&](std::size_t i) {
          std::vector<double> contributions;
          for (int r = 0; r < world; ++r) contributions.push_back(input(r, static_cast<std::size_t>(rank) * count + i));
          return reduce(op, contributions);
        };
        Buffer send = upload(HostArray(dtype, total, [&](std::size_t j) { return input(rank, j); }));
        Buffer recv = upload(HostArray(dtype, count, [](std::size_t) { return kSentinel; }));
        comm().reduce_scatter(send.data(), recv.data(), count, dtype, op, stream());
        stream().synchronize();
        std::string first;
        EXPECT_EQ(count_wrong(download(recv, dtype, count), expected, tolerance(dtype, op), &first), 0u) << first;
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, AllReduce) {
  const int rank = comm().rank();
  const int world = comm().size();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
    for (DType dtype : kDTypes) {
      for (std::size_t count : counts(world)) {
        SCOPED_TRACE(label("all_reduce", dtype, count) + " op=" + reduce_op_name(op));
        auto input = [&](int r, std::size_t i) {
          return op == ReduceOp::kAvg ? same_on_all_ranks(i) : value(r, i, dtype);
        };
        auto expected = [&](std::size_t i) {
          std::vector<double> contributions;
          for (int r = 0; r < world; ++r) contributions.push_back(input(r, i));
          return reduce(op, contributions);
        };
        HostArray in(dtype, count, [&](std::size_t i) { return input(rank, i); });
        Buffer send = upload(in);
        Buffer recv = upload(HostArray(dtype, count, [](std::size_t) { return kSentinel; }));
        comm().all_reduce(send.data(), recv.data(), count, dtype, op, stream());
        stream().synchronize();
        std::string first;
        EXPECT_EQ(count_wrong(download(recv, dtype, count), expected, tolerance(dtype, op), &first), 0u) << first;

        Buffer inplace = upload(in);
        comm().all_reduce(inplace.data(), inplace.data(), count, dtype, op, stream());
        stream().synchronize();
        EXPECT_EQ(count_wrong(download(inplace, dtype, count), expected, tolerance(dtype, op), &first), 0u)
            << "in place: " << first;
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, Broadcast) {
  const int rank = comm().rank();
  const int world = comm().size();
  for (int root : {0, world - 1}) {
    for (DType dtype : kDTypes) {
      for (std::size_t count : counts(world)) {
        SCOPED_TRACE(label("broadcast", dtype, count) + " root=" + std::to_string(root));
        auto expected = [&](std::size_t i) { return value(root, i, dtype); };
        HostArray in(dtype, count, [&](std::size_t i) { return value(rank, i, dtype); });
        Buffer send = upload(in);
        Buffer recv = upload(HostArray(dtype, count, [](std::size_t) { return kSentinel; }));
        comm().broadcast(send.data(), recv.data(), count, dtype, root, stream());
        stream().synchronize();
        std::string first;
        EXPECT_EQ(count_wrong(download(recv, dtype, count), expected, 0.0, &first), 0u) << first;

        Buffer inplace = upload(in);
        comm().broadcast(inplace.data(), inplace.data(), count, dtype, root, stream());
        stream().synchronize();
        EXPECT_EQ(count_wrong(download(inplace, dtype, count), expected, 0.0, &first), 0u) << "in place: " << first;
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, BarrierAndSequenceNumbers) {
  std::uint64_t before = comm().sequence();
  comm().barrier(stream());
  comm().barrier(stream());
  stream().synchronize();
  EXPECT_EQ(comm().sequence(), before + 2);
  // A zero-count collective launches nothing but still takes a sequence number.
  comm().all_reduce(nullptr, nullptr, 0, DType::kF32, ReduceOp::kSum, stream());
  stream().synchronize();
  EXPECT_EQ(comm().sequence(), before + 3);
}

TEST_F(NcclCommunicatorTest, SendRecv) {
  const int rank = comm().rank();
  const int world = comm().size();
  Buffer one = dev().allocate(64, MemCategory::kCommBuffer);
  // Rejected locally (so on every rank at once), before any sequence number is taken: a send to self is unsupported
  // by NCCL, an invalid argument to MPI.
  const ErrorCode to_self = on_nccl() ? ErrorCode::kUnsupported : ErrorCode::kInvalidArgument;
  EXPECT_EQ(error_code_of([&] { comm().send(one.data(), 4, DType::kF32, rank, stream()); }), to_self);
  EXPECT_EQ(error_code_of([&] { comm().recv(one.data(), 4, DType::kF32, rank, stream()); }), to_self);
  EXPECT_EQ(error_code_of([&] { comm().send(one.data(), 4, DType::kF32, world, stream()); }),
            ErrorCode::kInvalidArgument);
  // Pairs (0,1), (2,3), ...: the even rank sends first, then the odd one answers; an odd-sized world's last rank idles.
  const int peer = rank ^ 1;
  if (peer >= world) return;
  for (DType dtype : kDTypes) {
    for (std::size_t count : counts(world)) {
      SCOPED_TRACE(label("send/recv", dtype, count) + " peer=" + std::to_string(peer));
      auto from = [&](int r) { return [&, r](std::size_t i) { return value(r, i, dtype); }; };
      Buffer mine = upload(HostArray(dtype, count, from(rank)));
      Buffer theirs = upload(HostArray(dtype, count, [](std::size_t) { return kSentinel; }));
      for (int turn = 0; turn < 2; ++turn) {
        bool sending = (rank % 2 == 0) == (turn == 0);
        if (sending) {
          comm().send(mine.data(), count, dtype, peer, stream());
        } else {
          comm().recv(theirs.data(), count, dtype, peer, stream());
        }
      }
      stream().synchronize();
      std::string first;
      EXPECT_EQ(count_wrong(download(theirs, dtype, count), from(peer), 0.0, &first), 0u) << first;
    }
  }
}

// NCCL's validation, on the calling thread. The staged communicator validates as MPI does, in the stream's work
// (test_collectives under STRATA_COMM=mpi-staged), and is filtered out of this test where it runs.
TEST_F(NcclCommunicatorTest, ValidationCatchesMismatchedCalls) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  if (!on_nccl()) GTEST_SKIP() << "NCCL's validation at the call; " << backend() << " validates in the stream";
  const int rank = comm().rank();
  Buffer buf = dev().allocate(16 * sizeof(float), MemCategory::kCommBuffer);
  // Rank 0 disagrees on the count: every rank sees the same table and throws, and nothing is launched.
  std::size_t count = rank == 0 ? 8 : 9;
  EXPECT_EQ(
      error_code_of([&] { comm().all_reduce(buf.data(), buf.data(), count, DType::kF32, ReduceOp::kSum, stream()); }),
      ErrorCode::kMismatch);
  EXPECT_EQ(
      error_code_of([&] { comm().broadcast(buf.data(), buf.data(), 4, DType::kF32, rank == 0 ? 0 : 1, stream()); }),
      ErrorCode::kMismatch);
  // A pair that disagrees on the dtype: both sides throw.
  if ((rank ^ 1) < comm().size()) {
    DType dtype = rank % 2 == 0 ? DType::kF32 : DType::kI32;
    EXPECT_EQ(error_code_of([&] {
                if (rank % 2 == 0) {
                  comm().send(buf.data(), 4, dtype, rank ^ 1, stream());
                } else {
                  comm().recv(buf.data(), 4, dtype, rank ^ 1, stream());
                }
              }),
              ErrorCode::kMismatch);
    // Both sides sending first would deadlock ungrouped NCCL: both throw instead. Both receiving first next brings
    // the per-peer sequence numbers back in step.
    EXPECT_EQ(error_code_of([&] { comm().send(buf.data(), 4, DType::kF32, rank ^ 1, stream()); }),
              ErrorCode::kMismatch);
    EXPECT_EQ(error_code_of([&] { comm().recv(buf.data(), 4, DType::kF32, rank ^ 1, stream()); }),
              ErrorCode::kMismatch);
    // In step again: a matched pair goes through.
    if (rank % 2 == 0) {
      comm().send(buf.data(), 4, DType::kF32, rank ^ 1, stream());
    } else {
      comm().recv(buf.data(), 4, DType::kF32, rank ^ 1, stream());
    }
    stream().synchronize();
  }
  // The communicator is still healthy.
  HostArray ones(DType::kF32, 16, [](std::size_t) { return 1.0; });
  Buffer sum = upload(ones);
  comm().all_reduce(sum.data(), sum.data(), 16, DType::kF32, ReduceOp::kSum, stream());
  stream().synchronize();
  std::string first;
  double world = comm().size();
  EXPECT_EQ(count_wrong(
                download(sum, DType::kF32, 16), [&](std::size_t) { return world; }, 0.0, &first),
            0u)
      << first;
}

// A batch with this rank itself, at any np: the send and its recv run in one NCCL group, in either order.
TEST_F(NcclCommunicatorTest, BatchSelfExchange) {
  const int rank = comm().rank();
  auto p2p = dev().create_stream("p2p");
  for (bool recv_first : {false, true}) {
    for (DType dtype : kDTypes) {
      for (std::size_t count : counts(comm().size())) {
        SCOPED_TRACE(label("batch self", dtype, count) + (recv_first ? " recv first" : " send first"));
        Buffer mine = upload(HostArray(dtype, count, [&](std::size_t i) { return value(rank, i, dtype); }));
        Buffer back = upload(HostArray(dtype, count, [](std::size_t) { return kSentinel; }));
        P2POp s = P2POp::send(mine.data(), count, dtype, rank);
        P2POp r = P2POp::recv(back.data(), count, dtype, rank);
        comm().batch_send_recv(recv_first ? std::vector<P2POp>{r, s} : std::vector<P2POp>{s, r}, *p2p);
        p2p->synchronize();
        std::string first;
        auto sent = [&](std::size_t i) { return value(rank, i, dtype); };
        EXPECT_EQ(count_wrong(download(back, dtype, count), sent, 0.0, &first), 0u) << first;
      }
    }
  }
}

// Every rank sends to rank+1 and receives from rank-1 in one batch. Every rank posting its send first is the order
// that deadlocks ungrouped NCCL point-to-point; at np 2 the ring is a pair exchanging both ways, at np 1 a self
// exchange. More than one rank needs a GPU per rank (SetUp skips otherwise).
TEST_F(NcclCommunicatorTest, BatchRing) {
  const int rank = comm().rank();
  const int world = comm().size();
  const int to = (rank + 1) % world;
  const int from = (rank + world - 1) % world;
  auto p2p = dev().create_stream("p2p");
  for (bool odd_recv_first : {false, true}) {
    for (DType dtype : kDTypes) {
      for (std::size_t count : counts(world)) {
        SCOPED_TRACE(label("batch ring", dtype, count) + (odd_recv_first ? " odd ranks recv first" : " send first"));
        Buffer mine = upload(HostArray(dtype, count, [&](std::size_t i) { return value(rank, i, dtype); }));
        Buffer theirs = upload(HostArray(dtype, count, [](std::size_t) { return kSentinel; }));
        P2POp s = P2POp::send(mine.data(), count, dtype, to);
        P2POp r = P2POp::recv(theirs.data(), count, dtype, from);
        bool recv_first = odd_recv_first && rank % 2 == 1;
        comm().batch_send_recv(recv_first ? std::vector<P2POp>{r, s} : std::vector<P2POp>{s, r}, *p2p);
        p2p->synchronize();
        std::string first;
        auto sent = [&](std::size_t i) { return value(from, i, dtype); };
        EXPECT_EQ(count_wrong(download(theirs, dtype, count), sent, 0.0, &first), 0u) << first;
      }
    }
  }
}

// The argument checks hold for every backend; a mismatch throws at the call on NCCL, at synchronize() on the staged
// communicator (as on MPI: test_collectives' P2PBatch tests under STRATA_COMM=mpi-staged).
TEST_F(NcclCommunicatorTest, BatchRejectsBadArgumentsAndMismatches) {
  const int rank = comm().rank();
  const int world = comm().size();
  auto p2p = dev().create_stream("p2p");
  Buffer buf = dev().allocate(16 * sizeof(float), MemCategory::kCommBuffer);
  auto code_of = [&](const std::vector<P2POp>& ops) {
    return error_code_of([&] { comm().batch_send_recv(ops, *p2p); });
  };
  // Rejected locally, before any sequence number is taken.
  EXPECT_EQ(code_of({P2POp::send(buf.data(), 4, DType::kF32, world)}), ErrorCode::kInvalidArgument);
  P2POp not_p2p = P2POp::recv(buf.data(), 4, DType::kF32, rank);
  not_p2p.kind = OpKind::kBroadcast;
  EXPECT_EQ(code_of({not_p2p}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({P2POp::send(buf.data(), 4, DType::kF32, rank)}), ErrorCode::kInvalidArgument);
  auto cpu = create_device(DeviceKind::kCpu, 0, kTimeoutS);
  EXPECT_EQ(error_code_of([&] {
              comm().batch_send_recv(
                  {P2POp::send(buf.data(), 4, DType::kF32, rank), P2POp::recv(buf.data(), 4, DType::kF32, rank)},
                  cpu->compute_stream());
            }),
            ErrorCode::kInvalidArgument);
  comm().batch_send_recv({}, *p2p);  // a no-op
  // A pair that disagrees on a count: both sides throw, the pair's matching op still runs, and the pair stays in step.
  const int peer = rank ^ 1;
  if (peer < world && on_nccl()) {
    Buffer mine = upload(HostArray(DType::kI32, 5, [&](std::size_t i) { return value(rank, i, DType::kI32); }));
    Buffer theirs = upload(HostArray(DType::kI32, 5, [](std::size_t) { return kSentinel; }));
    std::size_t count = rank % 2 == 0 ? 8 : 9;
    P2POp mismatched = rank % 2 == 0 ? P2POp::send(buf.data(), count, DType::kF32, peer)
                                     : P2POp::recv(buf.data(), count, DType::kF32, peer);
    EXPECT_EQ(code_of({mismatched, P2POp::send(mine.data(), 5, DType::kI32, peer),
                       P2POp::recv(theirs.data(), 5, DType::kI32, peer)}),
              ErrorCode::kMismatch);
    p2p->synchronize();
    std::string first;
    auto from_peer = [&](std::size_t i) { return value(peer, i, DType::kI32); };
    EXPECT_EQ(count_wrong(download(theirs, DType::kI32, 5), from_peer, 0.0, &first), 0u) << first;
    Buffer again = upload(HostArray(DType::kI32, 5, [](std::size_t) { return kSentinel; }));
    comm().batch_send_recv(
        {P2POp::recv(again.data(), 5, DType::kI32, peer), P2POp::send(mine.data(), 5, DType::kI32, peer)}, *p2p);
    p2p->synchronize();
    EXPECT_EQ(count_wrong(download(again, DType::kI32, 5), from_peer, 0.0, &first), 0u) << first;
  }
  // The communicator is still healthy.
  Buffer one = upload(HostArray(DType::kI32, 1, [](std::size_t) { return 1.0; }));
  comm().all_reduce(one.data(), one.data(), 1, DType::kI32, ReduceOp::kSum, stream());
  stream().synchronize();
  EXPECT_EQ(download(one, DType::kI32, 1).get(0), static_cast<double>(world));
}

TEST_F(NcclCommunicatorTest, StreamsAndEventsOrderCommunication) {
  const int world = comm().size();
  const int rank = comm().rank();
  const std::size_t count = (std::size_t{1} << 22) + 1;
  auto comm_stream = dev().create_stream("comm");
  auto uploaded = dev().create_event();
  auto reduced = dev().create_event();
  HostArray in(DType::kF32, count, [&](std::size_t i) { return value(rank, i, DType::kF32); });
  Buffer staging = upload(in);
  Buffer work = dev().allocate(in.bytes(), MemCategory::kCommBuffer);
  Buffer result = dev().allocate(in.bytes(), MemCategory::kCommBuffer);
  // compute: copy in; comm: all_reduce after it; compute: copy out after that.
  dev().copy(work.data(), staging.data(), in.bytes(), stream());
  stream().record(*uploaded);
  comm_stream->wait(*uploaded);
  comm().all_reduce(work.data(), work.data(), count, DType::kF32, ReduceOp::kSum, *comm_stream);
  comm_stream->record(*reduced);
  stream().wait(*reduced);
  dev().copy(result.data(), work.data(), in.bytes(), stream());
  stream().synchronize();
  auto expected = [&](std::size_t i) {
    double sum = 0;
    for (int r = 0; r < world; ++r) sum += value(r, i, DType::kF32);
    return sum;
  };
  std::string first;
  EXPECT_EQ(count_wrong(download(result, DType::kF32, count), expected, 0.0, &first), 0u) << first;
  comm_stream->synchronize();
}

TEST_F(NcclCommunicatorTest, RejectsStreamsOfOtherDevices) {
  auto cpu = create_device(DeviceKind::kCpu, 0, kTimeoutS);
  std::uint64_t before = comm().sequence();
  Buffer buf = dev().allocate(64, MemCategory::kCommBuffer);
  EXPECT_EQ(error_code_of([&] {
              comm().all_reduce(buf.data(), buf.data(), 4, DType::kF32, ReduceOp::kSum, cpu->compute_stream());
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { comm().barrier(cpu->compute_stream()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(comm().sequence(), before);
}

TEST_F(NcclCommunicatorTest, Split) {
  const int rank = comm().rank();
  const int world = comm().size();
  // Two halves by parity, ordered by descending rank.
  const int color = rank % 2;
  std::unique_ptr<Communicator> half = comm().split(color, -rank);
  std::vector<int> members;
  for (int r = world - 1; r >= 0; --r)
    if (r % 2 == color) members.push_back(r);
  EXPECT_TRUE(half != nullptr);
  if (half) {
    EXPECT_EQ(half->name(), "world/c" + std::to_string(color));
    EXPECT_EQ(half->size(), static_cast<int>(members.size()));
    EXPECT_EQ(half->rank(), static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin()));
    EXPECT_STREQ(half->backend_name(), backend());
    EXPECT_EQ(half->sequence(), 0u);
    const std::size_t count = 1009;
    Buffer buf = upload(HostArray(DType::kI64, count, [&](std::size_t i) { return value(rank, i, DType::kI64); }));
    half->all_reduce(buf.data(), buf.data(), count, DType::kI64, ReduceOp::kSum, stream());
    half->barrier(stream());
    stream().synchronize();
    auto expected = [&](std::size_t i) {
      double sum = 0;
      for (int r : members) sum += value(r, i, DType::kI64);
      return sum;
    };
    std::string first;
    EXPECT_EQ(count_wrong(download(buf, DType::kI64, count), expected, 0.0, &first), 0u) << first;
  }
  half.reset();

  // Rank 0 opts out; the others form one group.
  std::unique_ptr<Communicator> rest = comm().split(rank == 0 ? -1 : 5, 0);
  if (rank == 0) {
    EXPECT_TRUE(rest == nullptr);
  } else if (rest) {
    EXPECT_EQ(rest->name(), "world/c5");
    EXPECT_EQ(rest->size(), world - 1);
    EXPECT_EQ(rest->rank(), rank - 1);
  } else {
    ADD_FAILURE() << "split with color 5 gave no communicator";
  }
  rest.reset();

  // Everyone opts out.
  EXPECT_TRUE(comm().split(-1, rank) == nullptr);

  // The parent still works.
  Buffer one = upload(HostArray(DType::kI32, 1, [](std::size_t) { return 1.0; }));
  comm().all_reduce(one.data(), one.data(), 1, DType::kI32, ReduceOp::kSum, stream());
  stream().synchronize();
  EXPECT_EQ(download(one, DType::kI32, 1).get(0), static_cast<double>(world));
}

}  // namespace
}  // namespace strata
