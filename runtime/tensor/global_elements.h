// A tensor-parallel model's elements seen whole: each rank holds the local slices of its split slots (TpSplit) and a
// copy of the replicated ones, and a pipeline stage may hold a tied copy of another stage's unit. These give a
// trainer what makes such a model count and start as the unsplit one: the groups and the mask of a global gradient
// norm (ShardedAdamW's OptimizerOptions::norm_groups and ::counted), an init by global index, and the global size.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_unit.h"
#include "runtime/sharding/state_memory.h"

namespace strata {

// The groups a gradient norm sums over beyond the data-parallel ones: the mesh's tp group, then its pp group, each
// when it has more than one rank.
std::vector<Communicator*> model_parallel_norm_groups(const DeviceMesh& mesh);

// Whether slot s of unit u counts in the norm on this rank, so that every element of the whole model counts once:
// a replicated slot on tp rank 0 only, the tied copy (`tied_copy_unit`, -1: none) never. Empty (every slot
// counts) at tp 1 without a tied copy.
std::function<bool(int unit, const ParamSlot& slot)> counted_once(const DeviceMesh& mesh, int tied_copy_unit = -1);
// Within a counted split slot, the runs this tp rank counts: all but the pieces an earlier tp rank holds too (shared
// key-value heads, TpSplit::atom). Empty at tp 1. ShardedAdamW's OptimizerOptions::counted_runs beside counted_once.
std::function<void(const ParamSlot& slot, std::size_t begin, std::size_t count,
                   const std::function<void(std::size_t begin, std::size_t length)>& counted)>
counted_runs_once(const DeviceMesh& mesh);

// fill(slot, global_begin, count, out): the values of elements [global_begin, global_begin + count) of the slot's
// global tensor.
using GlobalInit = std::function<void(const ParamSlot& slot, std::size_t global_begin, std::size_t count, float* out)>;
// An init for ShardedModel::init in which each local element of a split slot takes the value of its place in the
// global tensor (padded elements 0), so the model starts the same at every tp degree.
SlotInit init_by_global_index(const DeviceMesh& mesh, GlobalInit fill);

// A run of a slot's elements on this rank: `count` of them, from element `global` of the global tensor (row-major),
// at `local` in the caller's buffer.
struct GlobalRun {
  std::size_t local = 0, global = 0, count = 0;
};
// fill(slot, runs, out): every run of a slot's local elements at once, for a reader that gathers them better than one
// run at a time (a transposed file tensor, read a column at a time). out[run.local ...] takes run.count values.
using GlobalRunsInit = std::function<void(const ParamSlot& slot, const std::vector<GlobalRun>& runs, float* out)>;
// init_by_global_index with the runs of each local range handed over together (`local` counted from its start).
SlotInit init_by_global_runs(const DeviceMesh& mesh, GlobalRunsInit fill);

// Elements of the unsplit model the units declare (the global shape of split slots).
std::size_t global_numel(const std::vector<UnitSpec>& units);

}  // namespace strata
