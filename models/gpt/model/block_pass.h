// One block of either family over a set of rows (unit_slots.h says which weights a family has): its norm, q | k | v,
// the attention core, its output product, the residual, the MLP's norm, its up product, its activation, its down
// product, the residual. The order and the kernels are block_forward's; where the rows live and how a product
// crosses the tp group are the pass's (BlockOps), and the attention is the pass's hook: causal over the micro-batch or
// a ring over cp (GptModel's training forward, and the recomputation that rebuilds it), or the KV cache (GptDecoder).
#pragma once

#include <functional>
#include <vector>

#include "kernels/kernel_table.h"
#include "models/gpt/model/unit_slots.h"
#include "runtime/tensor/parallel_linear.h"

namespace strata::gpt {

// Where one pass of a block writes what it computes, on the pass's rows (a pass that keeps nothing may give the two
// norms one buffer, as the decoder does). Statistics a family does not compute (RMSNorm's mean) may be null.
struct BlockBuffers {
  float *ln1 = nullptr, *ln1_mean = nullptr, *ln1_rstd = nullptr;
  float *qkv = nullptr, *atty = nullptr, *lse = nullptr;
  float* xmid = nullptr;
  float *ln2 = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
  float *fch = nullptr, *fch_act = nullptr;
};

// The pass's arithmetic on its rows, as block_forward calls it.
class BlockOps {
 public:
  virtual ~BlockOps() = default;
  // The family's norm (LayerNorm with its mean and bias, or RMSNorm) of x into out.
  virtual void norm(float* out, float* mean, float* rstd, const float* x, const float* weight, const float* bias) = 0;
  // A column-parallel product of a norm's output (each tp rank its columns): q | k | v (`attention`), or the MLP's up
  // product.
  virtual void column(bool attention, float* out, const float* ln, const float* weight, const float* bias) = 0;
  // A row-parallel product: the attention's output product (`attention`) or the MLP's down product, this rank's
  // partial sums reduced over tp, then the bias; returns where the result is.
  virtual const float* row(bool attention, const float* in, const float* weight, const float* bias) = 0;
  // The MLP's activation: GELU over the up product, or SwiGLU over gate | up.
  virtual void mlp_act(float* out, const float* up) = 0;
  // out = a + b over the rows of x.
  virtual void residual(float* out, const float* a, const float* b) = 0;
};

// The family's norm of `rows` rows of x into out: LayerNorm (its mean and bias) or RMSNorm (mean unused).
inline void family_norm(Kernels& k, const GptConfig& cfg, float* out, float* mean, float* rstd, const float* x,
                        const float* weight, const float* bias, int rows) {
  if (cfg.llama())
    k.rmsnorm_forward(out, rstd, x, weight, rows, cfg.embd, cfg.norm_eps);
  else
    k.layernorm_forward(out, mean, rstd, x, weight, bias, rows, cfg.embd);
}
// The MLP's activation of `rows` rows into `width` outputs: GELU over the up product, or SwiGLU over gate | up.
inline void family_mlp_activation(Kernels& k, const GptConfig& cfg, float* out, const float* up, int rows,
                                  std::size_t width) {
  if (cfg.llama())
    k.swiglu_forward(out, up, rows, static_cast<int>(width));
  else
    k.gelu_forward(out, up, static_cast<std::size_t>(rows) * width);
}

// A block's four products over a tp group (Megatron's split): q | k | v and the MLP's up product (GPT-2's c_fc, or
// SwiGLU's gate | up) column-parallel, the attention's output and the MLP's down product row-parallel. Llama's q | k |
// v are the query heads' width and the key-value heads' twice, cut by heads.
struct BlockLinears {
  BlockLinears(TensorParallel& tp, LinearKernels& k, const GptConfig& cfg)
      : qkv(cfg.llama()
                ? ColumnParallelLinear(tp, k, cfg.embd, std::vector<int>{cfg.q_width(), cfg.kv_width(), cfg.kv_width()},
                                       cfg.hd())
                : ColumnParallelLinear(tp, k, cfg.embd, 3 * cfg.embd, 3)),
        up(tp, k, cfg.embd, cfg.llama() ? 2 * cfg.mlp_width() : cfg.mlp_width(), cfg.llama() ? 2 : 1),
        out(tp, k, cfg.q_width(), cfg.embd),
        down(tp, k, cfg.mlp_width(), cfg.embd) {}
  ColumnParallelLinear qkv, up;
  RowParallelLinear out, down;
  // The attention's product (`attention`) or the MLP's, as BlockOps names them.
  ColumnParallelLinear& column(bool attention) { return attention ? qkv : up; }
  RowParallelLinear& row(bool attention) { return attention ? out : down; }
};

// A row-parallel product of `rows` rows (0: the group's micro-batch): through `lin` (this rank's partial sums into
// `partial`, reduced over tp into `reduced` or in place, then the bias) when the pass runs the tp data flow; without
// it the plain product with its bias fused into `partial` (the order a one-rank run has always summed in). Returns
// where the result is.
inline const float* row_product(Kernels& k, RowParallelLinear& lin, bool tp_flow, float* partial, float* reduced,
                                const float* in, const float* weight, const float* bias, int rows) {
  if (tp_flow) return lin.forward(partial, reduced, in, weight, bias, rows);
  k.matmul_forward(partial, in, weight, bias, rows, lin.local_in(), lin.out());
  return partial;
}

// The attention core: atty (and its log-sum-exp) from q | k | v, q and k rotated first where the family rotates them.
using AttentionHook = std::function<void(float* atty, float* lse, float* qkv)>;

// x to out (out may be x: the last residual reads only xmid and the down product). `param(slot)`: the block's weight at
// a BlockSlots index (null at -1).
template <typename Param>
void block_forward(BlockOps& ops, const BlockSlots& bs, const Param& param, const float* x, float* out,
                   const BlockBuffers& b, const AttentionHook& attend) {
  ops.norm(b.ln1, b.ln1_mean, b.ln1_rstd, x, param(bs.ln1w), param(bs.ln1b));
  ops.column(true, b.qkv, b.ln1, param(bs.attnw), param(bs.attnb));
  attend(b.atty, b.lse, b.qkv);
  ops.residual(b.xmid, x, ops.row(true, b.atty, param(bs.projw), param(bs.projb)));
  ops.norm(b.ln2, b.ln2_mean, b.ln2_rstd, b.xmid, param(bs.ln2w), param(bs.ln2b));
  ops.column(false, b.fch, b.ln2, param(bs.fcw), param(bs.fcb));
  ops.mlp_act(b.fch_act, b.fch);
  ops.residual(out, b.xmid, ops.row(false, b.fch_act, param(bs.fcprojw), param(bs.fcprojb)));
}

}  // namespace strata::gpt
