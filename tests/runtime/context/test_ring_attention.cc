// Ring attention (runtime/context) on the CPU kernels (kernels/cpu), over the mesh's cp group at cp = the world size and, at
// np 4, dp_shard 2 x cp 2 (two rings side by side, each on data of its own): every rank's rows of the output, the
// log-sum-exp and the gradients of q, k and v equal the one-rank tiled attention over the whole sequence
// (attention_forward / attention_backward) at the same global positions, multi-head and grouped-query (2 and 1 key /
// value heads for 4 query heads). The sequence is cut into 2 cp chunks that are not whole tiles, so blocks start and
// end inside tiles.
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

TEST(GptRingAttention, EqualsOneRankAttentionOverTheWholeSequence) {
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

TEST(GptRingAttention, ChunksAreMirroredAndCoverTheSequence) {
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

TEST(GptRingAttention, BadShapesAreNamed) {
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
