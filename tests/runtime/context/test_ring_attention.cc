// Ring attention (runtime/context) on the CPU kernels (kernels/cpu), over the mesh's cp group at cp = the world size
// and, at np 4, dp_shard 2 x cp 2 (two rings side by side, each on data of its own): every rank's rows of the output,
// the log-sum-exp and the gradients of q, k and v equal the one-rank tiled attention over the whole sequence
// (attention_forward / attention_backward) at the same global positions, multi-head and grouped-query (2 and 1 key /
// value heads for 4 query heads). The sequence is cut into 2 cp chunks that are not whole tiles, so blocks start and
// end inside tiles. Over bf16 activations the ring is the f32 ring on the widened values, rounded once, bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/kernel_table.h"
#include "runtime/context/ring_attention.h"
#include "runtime/parallel/device_mesh.h"
#include "tests/support/compare.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using namespace strata::cpu;  // the CPU kernels, unqualified

using strata::test::runtime;

struct Shape {
  int B = 2, chunk = 37, C = 32, NH = 4;  // chunk rows: neither a tile (64) nor a divisor of one
  int KVH = 4;                            // key / value heads: 4 (multi-head), 2 or 1 (grouped-query, multi-query)
};

// The same values on every rank: uniform in [-2, 2) from a fixed seed.
std::vector<float> values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// This rank's rows (local order) of a [B, T, width] tensor, or of an [B, NH, T] statistic (width 0).
std::vector<float> local_rows(const std::vector<float>& whole, const ContextChunks& ch, int B, int width, int NH) {
  const int T = ch.seq, L = ch.local_rows();
  std::vector<float> out;
  if (width > 0) {
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < L; ++i) {
        const float* row = whole.data() + (static_cast<std::size_t>(b) * T + ch.position(i)) * width;
        out.insert(out.end(), row, row + width);
      }
  } else {
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < L; ++i) out.push_back(whole[(static_cast<std::size_t>(b) * NH + h) * T + ch.position(i)]);
  }
  return out;
}

// One ring of `cp`, its sequence drawn from `seed`: each rank's rows against the one-rank attention.
void check_ring(Communicator& cp, unsigned seed, const Shape& s) {
  const ContextChunks ch = ContextChunks::of(2 * cp.size() * s.chunk, cp.size(), cp.rank());
  const int T = ch.seq, L = ch.local_rows(), B = s.B, C = s.C, NH = s.NH, KVH = s.KVH;
  const int KV = KVH * (C / NH), W = C + 2 * KV;  // a k (or v) row's width, a qkv row's
  const std::vector<float> qkv = values(static_cast<std::size_t>(B) * T * W, seed);
  const std::vector<float> dout = values(static_cast<std::size_t>(B) * T * C, seed + 1);

  // The oracle: the whole sequence on one rank.
  std::vector<float> out(static_cast<std::size_t>(B) * T * C), lse(static_cast<std::size_t>(B) * NH * T);
  std::vector<float> dqkv = values(qkv.size(), seed + 2);  // the gradients are added into what the buffer holds
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
  attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);

  // The ring, on this rank's chunks.
  auto kernels = make_kernels(runtime().device());
  RingAttention ring(cp, *kernels, ch, B, C, NH, KVH);
  const std::vector<float> my_qkv = local_rows(qkv, ch, B, W, NH), my_dout = local_rows(dout, ch, B, C, NH);
  std::vector<float> my_out(static_cast<std::size_t>(B) * L * C), my_lse(static_cast<std::size_t>(B) * NH * L);
  std::vector<float> my_dqkv = local_rows(values(qkv.size(), seed + 2), ch, B, W, NH);
  ring.forward(my_out.data(), my_lse.data(), my_qkv.data());
  ring.backward(my_dqkv.data(), my_dout.data(), my_out.data(), my_lse.data(), my_qkv.data());

  // f32 with the blocks merged in another order than one online softmax: rounding only. Measured at np 1-4 with 4, 2
  // and 1 key / value heads (each rank's largest difference over its tensor's largest value): out 1.4e-7 to 5.2e-7,
  // lse 7e-8 to 1.7e-7, dqkv 1.7e-7 to 1.03e-6. A block missed or a gradient sent to the wrong rank is off by the
  // values' own size (about 1).
  const double out_err = test::max_abs_over_scale(my_out, local_rows(out, ch, B, C, NH));
  const double lse_err = test::max_abs_over_scale(my_lse, local_rows(lse, ch, B, 0, NH));
  const double grad_err = test::max_abs_over_scale(my_dqkv, local_rows(dqkv, ch, B, W, NH));
  fmt::print("ring attention cp {} rank {} kv heads {}: out {:.2e}, lse {:.2e}, dqkv {:.2e} (of their scale)\n",
             cp.size(), cp.rank(), KVH, out_err, lse_err, grad_err);
  EXPECT_LT(out_err, 1e-6);
  EXPECT_LT(lse_err, 1e-6);
  EXPECT_LT(grad_err, 3e-6);
  // A step sends one key / value block: B x L rows of k and v, KVH heads each (NH / KVH times less than multi-head).
  // The forward sends it on cp - 1 times, the backward cp - 1 times and its gradient cp times (none on one rank).
  const std::size_t block = static_cast<std::size_t>(B) * L * 2 * KV * sizeof(float);
  EXPECT_EQ(ring.block_bytes(), block);
  const std::size_t P = static_cast<std::size_t>(cp.size());
  EXPECT_EQ(ring.bytes_sent(), P > 1 ? block * (3 * P - 2) : 0);
  EXPECT_EQ(ring.comm_buffer_bytes(), (P > 1 ? 4 : 2) * block);
}

TEST(RingAttention, EqualsOneRankAttentionOverTheWholeSequence) {
  if (runtime().backend() != DeviceKind::kCpu) GTEST_SKIP() << "ring attention runs on the CPU backend only";
  const int world = runtime().world_size();
  for (int cp : {world, world / 2}) {
    if (cp < 1 || (cp == world / 2 && (world < 4 || world % 2 != 0))) continue;
    DeviceMesh mesh(runtime(), MeshDims{1, 1, -1, 1, cp});
    SCOPED_TRACE(mesh.describe());
    for (int kvh : {4, 2, 1}) {
      SCOPED_TRACE(fmt::format("kv heads {}", kvh));
      Shape s;
      s.KVH = kvh;
      check_ring(mesh.cp(), 7 + 10 * static_cast<unsigned>(mesh.dp().rank()), s);  // each ring its own sequence
    }
  }
}

std::vector<Bf16> rounded(const std::vector<float>& x) {
  std::vector<Bf16> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = Bf16::from(x[i]);
  return out;
}
std::vector<float> widened(const std::vector<Bf16>& x) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i].value();
  return out;
}
// The first index at which two bf16 tensors differ, or -1.
long first_difference(const std::vector<Bf16>& a, const std::vector<Bf16>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].bits != b[i].bits) return static_cast<long>(i);
  return -1;
}

// One bf16 ring against the f32 ring on the same (widened) values: the blocks travel in bf16, the arithmetic is the
// f32 kernels' on the widened values, the output and the gradients summed in f32 and rounded once. So the bf16 ring's
// output is the f32 ring's rounded, its lse the f32 ring's, and its dqkv the bf16 sum dqkv + (the f32 ring's gradient
// from zero), rounded once: all bit for bit.
void check_bf16_ring(Communicator& cp, unsigned seed, const Shape& s) {
  const ContextChunks ch = ContextChunks::of(2 * cp.size() * s.chunk, cp.size(), cp.rank());
  const int L = ch.local_rows(), B = s.B, C = s.C, NH = s.NH, KVH = s.KVH;
  const int KV = KVH * (C / NH), W = C + 2 * KV;
  const std::size_t n_qkv = static_cast<std::size_t>(B) * L * W, n_out = static_cast<std::size_t>(B) * L * C;
  const std::vector<Bf16> qkv = rounded(values(n_qkv, seed + cp.rank()));
  const std::vector<Bf16> dout = rounded(values(n_out, seed + 100 + cp.rank()));
  const std::vector<Bf16> dqkv0 = rounded(values(n_qkv, seed + 200 + cp.rank()));  // what the gradient is added to
  auto kernels = make_kernels(runtime().device());

  RingAttention f32(cp, *kernels, ch, B, C, NH, KVH);
  std::vector<float> out(n_out), lse(static_cast<std::size_t>(B) * NH * L), dqkv(n_qkv, 0.0f);
  f32.forward(out.data(), lse.data(), widened(qkv).data());
  const std::vector<Bf16> out_bf16 = rounded(out);
  f32.backward(dqkv.data(), widened(dout).data(), widened(out_bf16).data(), lse.data(), widened(qkv).data());

  RingAttention bf16(cp, *kernels, ch, B, C, NH, KVH, DType::kBF16);
  std::vector<Bf16> my_out(n_out);
  std::vector<float> my_lse(lse.size());
  std::vector<Bf16> my_dqkv = dqkv0;
  bf16.forward(my_out.data(), my_lse.data(), qkv.data());
  bf16.backward(my_dqkv.data(), dout.data(), my_out.data(), my_lse.data(), qkv.data());

  EXPECT_EQ(first_difference(my_out, out_bf16), -1) << "the output: not the f32 ring's, rounded once";
  EXPECT_EQ(my_lse, lse);
  std::vector<float> expected_sum(n_qkv);
  for (std::size_t i = 0; i < n_qkv; ++i) expected_sum[i] = dqkv0[i].value() + dqkv[i];
  EXPECT_EQ(first_difference(my_dqkv, rounded(expected_sum)), -1) << "dqkv: not dqkv + the f32 gradient, rounded once";
  // Some gradient reached every part of the row (q, k and v): the comparison is not of zeros.
  EXPECT_NE(first_difference(my_dqkv, dqkv0), -1);

  // The key / value blocks travel in bf16 (half the f32 ring's bytes), their gradients in f32.
  const std::size_t P = static_cast<std::size_t>(cp.size());
  EXPECT_EQ(2 * bf16.block_bytes(), f32.block_bytes());
  EXPECT_EQ(bf16.gradient_block_bytes(), f32.block_bytes());
  EXPECT_EQ(bf16.bytes_sent(), P > 1 ? bf16.block_bytes() * (2 * P - 2) + bf16.gradient_block_bytes() * P : 0);
  EXPECT_EQ(bf16.comm_buffer_bytes(), (P > 1 ? 2 : 1) * (bf16.block_bytes() + bf16.gradient_block_bytes()));
  // The workspace adds an f32 accumulator of this rank's output rows.
  EXPECT_EQ(bf16.workspace_bytes(), f32.workspace_bytes() + n_out * sizeof(float));

  // A ring made for bf16 refuses f32 activations, and the other way round, naming both.
  try {
    bf16.forward(out.data(), lse.data(), widened(qkv).data());
    ADD_FAILURE() << "f32 activations on a bf16 ring were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward over f32 activations on a ring made for bf16"), std::string::npos)
        << e.what();
  }
}

TEST(RingAttention, Bf16IsTheF32RingOnTheWidenedValuesRoundedOnce) {
  if (runtime().backend() != DeviceKind::kCpu) GTEST_SKIP() << "ring attention runs on the CPU backend only";
  DeviceMesh mesh(runtime(), MeshDims{1, 1, -1, 1, runtime().world_size()});
  for (int kvh : {4, 2, 1}) {
    SCOPED_TRACE(fmt::format("kv heads {}", kvh));
    Shape s;
    s.KVH = kvh;
    check_bf16_ring(mesh.cp(), 31, s);
  }
}

// Attention kernels that implement the f32 methods alone: the bf16 ones refuse by name (kUnsupported).
class F32Only : public AttentionKernels {
 public:
  void attention_block_forward(const AttentionBlock&, RowsOut, RowStatsOut, Rows, Rows, Rows) override {}
  void attention_block_backward(const AttentionBlock&, RowsOut, RowsOut, RowsOut, Rows, RowStats, RowStats, Rows, Rows,
                                Rows) override {}
  void attention_merge(const AttentionBlock&, RowsOut, RowStatsOut, Rows, RowStats) override {}
  void attention_row_dot(const AttentionBlock&, RowStatsOut, Rows, Rows) override {}
  void copy_rows(RowsOut, Rows, int, int, int, bool) override {}
};

TEST(RingAttention, Bf16OnKernelsWithoutItIsRefusedByName) {
  Communicator& cp = runtime().world();
  F32Only kernels;
  const ContextChunks ch = ContextChunks::of(4 * cp.size(), cp.size(), cp.rank());
  RingAttention ring(cp, kernels, ch, 1, 8, 2, 2, DType::kBF16);
  std::vector<Bf16> qkv(static_cast<std::size_t>(ch.local_rows()) * 24),
      out(static_cast<std::size_t>(ch.local_rows()) * 8);
  std::vector<float> lse(static_cast<std::size_t>(ch.local_rows()) * 2);
  try {
    ring.forward(out.data(), lse.data(), qkv.data());
    ADD_FAILURE() << "bf16 attention on kernels without it ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("copy_rows_bf16: these attention kernels have no bf16 activations"),
              std::string::npos)
        << e.what();
  }
}

TEST(RingAttention, ChunksAreMirroredAndCoverTheSequence) {
  for (int cp = 1; cp <= 4; ++cp) {
    std::vector<int> seen(static_cast<std::size_t>(8 * cp), 0);
    for (int r = 0; r < cp; ++r) {
      const ContextChunks ch = ContextChunks::of(8 * cp, cp, r);
      EXPECT_EQ(ch.position(0), 4 * r);                      // chunk r
      EXPECT_EQ(ch.position(4), 4 * (2 * cp - 1 - r));       // and its mirror
      for (int i = 0; i < ch.local_rows(); ++i) ++seen[static_cast<std::size_t>(ch.position(i))];
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
}

TEST(RingAttention, BadShapesAreNamed) {
  try {
    ContextChunks::of(30, 4, 0);
    ADD_FAILURE() << "a sequence of 30 over cp 4 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("the sequence (30 tokens) must be a positive multiple of 2 x cp = 8"),
              std::string::npos)
        << e.what();
  }
  Communicator& cp = runtime().world();
  auto kernels = make_kernels(runtime().device());
  const ContextChunks other = ContextChunks::of(4 * (cp.size() + 1), cp.size() + 1, 0);
  try {
    RingAttention ring(cp, *kernels, other, 1, 8, 2, 2);
    ADD_FAILURE() << "chunks of another cp were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("ring attention: chunks of cp {} rank 0, but the group",
                                                     cp.size() + 1)),
              std::string::npos)
        << e.what();
  }
  const ContextChunks mine = ContextChunks::of(4 * cp.size(), cp.size(), cp.rank());
  for (int kvh : {0, 3, 5}) {  // none, and counts that do not divide 4 query heads
    try {
      RingAttention ring(cp, *kernels, mine, 1, 8, 4, kvh);
      ADD_FAILURE() << kvh << " key / value heads for 4 query heads were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(fmt::format("ring attention: {} key / value heads must divide the 4", kvh)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace strata
