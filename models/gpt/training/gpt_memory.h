// Predicts, category by category, the bytes train_gpt's ledger will show on a rank: Strata's own buffers
// (predict_state_memory: the exact layout with the run's padding, the pools, the MPI backend's staging) plus the
// pool slots the GPT trainer adds, the activations GptModel keeps and its workspace, at any tp with or without
// sequence parallelism. train_gpt prints it beside the measured peak; a test holds them within 2%.
#pragma once

#include <cstdint>
#include <string>

#include "core/memory_stats.h"
#include "models/gpt/training/gpt_trainer.h"
#include "runtime/memory/step_memory.h"
#include "runtime/sharding/state_memory.h"

namespace strata::gpt {

using strata::CategoryBytes;  // bytes per MemCategory (runtime/sharding/state_memory.h)
using strata::total;

// Peak bytes per category during a training step (persistent state included) on the device, for a rank of a job
// of `world` ranks on the CPU backend: under cfg.tp, its tp slice of the model, data-parallel groups of world / tp
// ranks, the activations and workspace of its channels, heads and vocabulary rows (and under sequence parallelism its
// positions), and the tp group's staging (docs/memory-model.md).
// Under a pipeline (cfg.pipelined()), the ranks of pp rank `pp_rank`: its stage's units, its schedule's activation slots.
CategoryBytes predict_step_memory(const TrainConfig& cfg, int world, int pp_rank = 0);
// What that prediction declares to the library's (runtime/memory/step_memory.h): the rank's units, its options and
// groups, the pool slots its step holds, and GptModel's activations, workspace and staging by name
// (declaration_table prints them).
StepDeclaration declare_step_memory(const TrainConfig& cfg, int world, int pp_rank = 0);
// The same for the host memory offload uses (all zero without offload).
CategoryBytes predict_host_memory(const TrainConfig& cfg, int world, int pp_rank = 0);
// The host bytes of activation offload (GptModel::activation_host()'s ledger, category kActivations): every offloaded
// block's activations for each micro-batch the rank keeps in flight; 0 when no block offloads.
std::uint64_t predict_offloaded_activations(const TrainConfig& cfg, int pp_rank = 0);

// When `budget` device bytes per rank (what the device budget leaves to training) are too few: the first of the
// planner's changes (fit_changes, cheapest first) that this trainer supports and whose exact prediction fits, as
// "what: N MiB per rank predicted", or why none does.
std::string fit_advice(const TrainConfig& cfg, int world, std::uint64_t budget, int pp_rank = 0);

// --recompute auto: a kind per block (none, mlp, attention, full, offload; strata::choose_recompute's search, each
// pipeline stage on its own blocks) whose predicted step memory fits `budget` bytes per rank with the fewest FLOPs
// run again, then the fewest bytes offloaded. When nothing fits: an empty policy and *error says so, with the
// planner's cheapest change beyond recomputation (fit_advice).
RecomputePolicy choose_recompute(const TrainConfig& cfg, int world, std::uint64_t budget, std::string* error);

// The MPI backend's staging for the tensor-parallel group on a rank (part of predict_step_memory's comm_buffer; all
// zero at tp 1): the lane of the device's compute stream, which GptModel's collectives use, and the lane of the
// optimizer's stream, which the gradient norm's sum over tp uses. A lane's staging grows to its largest collective and
// lives as long as the group; when tp spans the world the group is the runtime's world communicator, so the compute
// lane outlives the trainer (a later trainer in the same process finds it allocated).
struct TpStaging {
  std::uint64_t compute = 0, norm = 0;
};
TpStaging predict_tp_staging(const TrainConfig& cfg);

// Bytes the tensor-parallel collectives move per step on a rank (TpTraffic's measure: an all-reduce's buffer, an
// all-gather's output, a reduce-scatter's input); all zero at tp 1.
TpTraffic predict_tp_traffic(const TrainConfig& cfg);
// Bytes one rank sends round the context-parallel ring in a step (RingAttention): per block and micro-batch, the
// forward's cp - 1 key / value blocks, the backward's cp - 1 blocks and cp of their gradients, and one more forward's
// for a block whose attention is recomputed (attention or full), over the layers of pp rank `pp_rank`'s stage. 0
// without cp.
std::uint64_t predict_cp_bytes(const TrainConfig& cfg, int pp_rank = 0);

// "category  predicted  measured  ratio" rows for the categories either side uses.
std::string prediction_table(const CategoryBytes& predicted, const CategoryBytes& measured);

}  // namespace strata::gpt
