// Host reductions used by the MPI backend: combine n equal chunks in rank order, accumulating 16-bit floats in f32.
#pragma once

#include <cstddef>

#include "collectives/op_desc.h"
#include "core/dtype.h"

namespace strata {

// out[i] = op(chunks[0][i], chunks[1][i], ..., chunks[n-1][i]) for i < count, where chunk r starts at
// chunks + r * chunk_stride elements. Sums run in rank order (deterministic); bf16 / f16 accumulate in f32 and
// round once; kAvg divides the sum by n (integer division for integer types). `out` may alias chunk 0..n-1.
void reduce_chunks(const void* chunks, std::size_t n, std::size_t chunk_stride, std::size_t count, DType dtype,
                   ReduceOp op, void* out);

// The same reduction (the same operations in the same order, so bitwise the same result) with chunk r at
// chunks[r], wherever each lies: the shared-memory path reads its peers' slots and its own input in place. `out`
// may alias any chunk.
void reduce_pieces(const void* const* chunks, std::size_t n, std::size_t count, DType dtype, ReduceOp op, void* out);

}  // namespace strata
