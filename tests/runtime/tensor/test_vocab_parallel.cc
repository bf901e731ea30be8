// The vocabulary-parallel embedding and cross-entropy over bf16 activations and logits (runtime/tensor/
// vocab_parallel.h) against the f32 ones on the same (bf16-representable) inputs, on the CPU kernel table at tp = np,
// with and without sequence parallelism. Both compute on the same widened values, so the bf16 results are the f32
// ones rounded once: the embedding's rows, the logits' gradient; the losses and the table's gradient are equal.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/kernel_table.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/tensor/tensor_parallel.h"
#include "runtime/tensor/vocab_parallel.h"
#include "tests/runtime/tensor/random_values.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

constexpr int kB = 2, kVocab = 11, kC = 6;

std::vector<float> bf16_values(std::size_t n, unsigned seed) { return test::uniform_values(n, seed, 2.0f, true); }

std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = Bf16::from(v[i]);
  return out;
}

// got[i] is want[i] rounded to bf16, bit for bit.
void expect_rounded(const Bf16* got, const float* want, std::size_t n, const char* what) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += got[i].bits != Bf16::from(want[i]).bits;
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << n << " values are not the f32 result rounded once";
}

TEST(VocabParallel, Bf16EmbeddingAndLossAreTheF32OnesRoundedOnce) {
  const int world = runtime().world_size();
  DeviceMesh mesh(runtime(), MeshDims{1, 1, 1, world});
  std::unique_ptr<Kernels> k = make_kernels(runtime().device());
  const int T_len = 2 * world;
  std::mt19937 gen(7);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(kB) * T_len), targets(tokens.size());
  for (auto& t : tokens) t = static_cast<std::int32_t>(gen() % kVocab);
  for (auto& t : targets) t = static_cast<std::int32_t>(gen() % kVocab);
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence parallel" : "no sequence parallelism");
    TensorParallel tp(runtime().device(), &mesh.tp(), sp, kB, T_len, kC);
    const VocabShard shard = VocabShard::of(kVocab, tp.size(), tp.rank());
    const auto rows = static_cast<std::size_t>(tp.rows()), local = static_cast<std::size_t>(tp.local_rows());
    std::vector<float> table = bf16_values(static_cast<std::size_t>(shard.rows) * kC, 11 + tp.rank());
    std::fill(table.begin() + static_cast<std::ptrdiff_t>(shard.valid) * kC, table.end(), 0.0f);  // padding rows

    // The embedding: this rank's rows of the sum over tp.
    std::vector<float> partial(rows * kC), out(local * kC);
    std::vector<Bf16> partial_b(rows * kC), out_b(local * kC);
    const float* e =
        vocab_parallel_embedding_forward(*k, tp, partial.data(), out.data(), tokens.data(), table.data(), shard, kC);
    const Bf16* e_b = vocab_parallel_embedding_forward(*k, tp, partial_b.data(), out_b.data(), tokens.data(),
                                                       table.data(), shard, kC);
    expect_rounded(e_b, e, local * kC, "embedding");

    // Its backward from a bf16-representable gradient.
    const std::vector<float> dout = bf16_values(local * kC, 21 + tp.rank());
    const std::vector<Bf16> dout_b = to_bf16(dout);
    std::vector<float> dtable(table.size(), 0.0f), dtable_b(table.size(), 0.0f), gathered(rows * kC);
    std::vector<Bf16> gathered_b(rows * kC);
    vocab_parallel_embedding_backward(*k, tp, dtable.data(), dout.data(), gathered.data(), tokens.data(), shard, kC);
    vocab_parallel_embedding_backward(*k, tp, dtable_b.data(), dout_b.data(), gathered_b.data(), tokens.data(), shard,
                                      kC);
    EXPECT_EQ(dtable_b, dtable) << "the table's gradient";

    // The loss over this rank's columns of the logits.
    const std::vector<float> logits = bf16_values(rows * static_cast<std::size_t>(shard.rows), 31 + tp.rank());
    const std::vector<Bf16> logits_b = to_bf16(logits);
    std::vector<float> losses(rows), losses_b(rows), dlogits(logits.size()), row_max(rows), stats(2 * rows);
    std::vector<Bf16> dlogits_b(logits.size());
    vocab_parallel_cross_entropy(*k, tp, losses.data(), dlogits.data(), logits.data(), targets.data(), shard, 0.5f,
                                 row_max.data(), stats.data());
    vocab_parallel_cross_entropy(*k, tp, losses_b.data(), dlogits_b.data(), logits_b.data(), targets.data(), shard,
                                 0.5f, row_max.data(), stats.data());
    EXPECT_EQ(losses_b, losses) << "the losses";
    expect_rounded(dlogits_b.data(), dlogits.data(), dlogits.size(), "the logits' gradient");
    for (float l : losses) EXPECT_GT(l, 0.0f);  // the premise: a real loss, not zeros
  }
}

}  // namespace
}  // namespace strata
