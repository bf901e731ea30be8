// Strata's public API, one header: `#include <strata/strata.h>` and link strata::strata (find_package(strata CONFIG)).
// It exports the runtime (start-up, the device and communicator seams, the device mesh), the sharded model with its
// options and views, tensor parallelism (the tp collectives, column- and row-parallel products, the vocabulary-
// parallel embedding and loss, the split of a parameter and the counting of a split model), pipeline parallelism (the
// schedules, the executor and its stage interface, parameters tied across stages), context parallelism (mirrored
// chunks of a sequence and ring attention over the trainer's attention kernels), the optimizer, the memory ledger
// and planner, checkpoints, generation over a model's Decoder (sampling, weight blocks streamed through device
// slots), the kernels of every model family (kernels/: the kernel table of a device, and the CPU kernels by op),
// and overflow-checked sizes (checked_math.h). Everything else is internal.
#pragma once

#include "core/checked_math.h"
#include "core/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/memory_stats.h"
#include "core/output_file.h"
#include "core/safetensors.h"
#include "collectives/communicator.h"
#include "collectives/rank_values.h"
#include "runtime/bootstrap/config_agreement.h"
#include "runtime/bootstrap/runtime.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/parallel/pipeline_executor.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/parallel/tp_split.h"
#include "runtime/sharding/flat_ops.h"
#include "runtime/sharding/sharded_model.h"
#include "runtime/sharding/sharded_parameters.h"
#include "runtime/sharding/sharding_options.h"
#include "runtime/context/attention_kernels.h"
#include "runtime/context/context_chunks.h"
#include "runtime/context/ring_attention.h"
#include "runtime/inference/block_streamer.h"
#include "runtime/inference/decoder.h"
#include "runtime/inference/generator.h"
#include "runtime/inference/kv_cache.h"
#include "runtime/inference/sampler.h"
#include "runtime/tensor/global_elements.h"
#include "runtime/tensor/parallel_linear.h"
#include "runtime/tensor/tensor_parallel.h"
#include "runtime/tensor/tied_parameters.h"
#include "runtime/tensor/tp_kernels.h"
#include "runtime/tensor/vocab_parallel.h"
#include "runtime/optim/grad_norm.h"
#include "runtime/optim/optimizer_state.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/memory/activation_offload.h"
#include "runtime/memory/memory_ledger.h"
#include "runtime/memory/memory_planner.h"
#include "runtime/memory/step_declaration_file.h"
#include "runtime/memory/step_memory.h"
#include "kernels/kernel_table.h"
#include "kernels/cpu/ops.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/data/tokenizer.h"
