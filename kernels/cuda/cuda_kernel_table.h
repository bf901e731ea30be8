// make_cuda_kernels: the Kernels of a CUDA device (the kernels of kernels/cuda/ops.h on its compute stream).
// No CUDA header here: kernels/kernel_table.cc includes it from a host-only translation unit.
#pragma once

#include <memory>

#include "kernels/kernel_table.h"
#include "core/device.h"

namespace strata::cuda {

// `device` must be a CUDA device; the kernels enqueue on its compute stream and must not outlive it.
// bf16_products: make_kernels' kBF16 (bf16 tensor-core GEMMs on bf16 copies of the operands, in workspace).
std::unique_ptr<Kernels> make_cuda_kernels(Device& device, bool bf16_products);

}  // namespace strata::cuda
