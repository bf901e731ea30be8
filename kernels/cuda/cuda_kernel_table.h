// make_cuda_gpt_kernels: the GptKernels of a CUDA device (the kernels of cuda_ops.h on its compute stream).
// No CUDA header here: models/gpt/model/kernel_table.cc includes it from a host-only translation unit.
#pragma once

#include <memory>

#include "models/gpt/model/kernel_table.h"
#include "core/device.h"

namespace strata::gpt::cuda {

// `device` must be a CUDA device; the kernels enqueue on its compute stream and must not outlive it.
// bf16_products: make_gpt_kernels' kBF16 (bf16 tensor-core GEMMs on bf16 copies of the operands, in workspace).
std::unique_ptr<GptKernels> make_cuda_gpt_kernels(Device& device, bool bf16_products);

}  // namespace strata::gpt::cuda
