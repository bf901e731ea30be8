// Norm groups, the counted mask, the init by global index and the global size of a tensor-parallel model.
#include "runtime/tensor/global_elements.h"

#include <algorithm>
#include <utility>

#include "runtime/sharding/shard_layout.h"

namespace strata {

std::vector<Communicator*> model_parallel_norm_groups(const DeviceMesh& mesh) {
  std::vector<Communicator*> groups;
  if (mesh.tp().size() > 1) groups.push_back(&mesh.tp());
  if (mesh.pp().size() > 1) groups.push_back(&mesh.pp());
  return groups;
}

std::function<bool(int, const ParamSlot&)> counted_once(const DeviceMesh& mesh, int tied_copy_unit) {
  if (mesh.tp().size() == 1 && tied_copy_unit < 0) return {};
  const int tp_rank = mesh.tp().rank();
  return [tp_rank, tied_copy_unit](int u, const ParamSlot& s) {
    return u != tied_copy_unit && (!s.tp.replicated() || tp_rank == 0);
  };
}

std::function<void(const ParamSlot&, std::size_t, std::size_t, const std::function<void(std::size_t, std::size_t)>&)>
counted_runs_once(const DeviceMesh& mesh) {
  const int tp = mesh.tp().size(), tp_rank = mesh.tp().rank();
  if (tp == 1) return {};
  return [tp, tp_rank](const ParamSlot& s, std::size_t begin, std::size_t count,
                       const std::function<void(std::size_t, std::size_t)>& counted) {
    if (s.tp.replicated() || s.tp.atom == 0) return counted(begin, count);
    std::size_t run_begin = 0, run_length = 0;  // local runs, merged where consecutive
    for_each_global_run(
        s.tp, tp_rank, tp, begin, count,
        [&](std::size_t local, std::size_t, std::size_t n) {
          if (run_length && run_begin + run_length == local) {
            run_length += n;
            return;
          }
          if (run_length) counted(run_begin, run_length);
          run_begin = local;
          run_length = n;
        },
        /*owned_only=*/true);
    if (run_length) counted(run_begin, run_length);
  };
}

SlotInit init_by_global_index(const DeviceMesh& mesh, GlobalInit fill) {
  return init_by_global_runs(
      mesh, [fill = std::move(fill)](const ParamSlot& s, const std::vector<GlobalRun>& runs, float* out) {
        for (const GlobalRun& r : runs) fill(s, r.global, r.count, out + r.local);
      });
}

SlotInit init_by_global_runs(const DeviceMesh& mesh, GlobalRunsInit fill) {
  const int tp = mesh.tp().size(), tp_rank = mesh.tp().rank();
  return [tp, tp_rank, fill = std::move(fill)](const ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
    std::vector<GlobalRun> runs;
    std::size_t filled = 0;  // local elements before it are a run's or zeroed padding
    for_each_global_run(s.tp, tp_rank, tp, begin, count, [&](std::size_t local, std::size_t global, std::size_t n) {
      std::fill(out + filled, out + (local - begin), 0.0f);
      runs.push_back(GlobalRun{local - begin, global, n});
      filled = local - begin + n;
    });
    std::fill(out + filled, out + count, 0.0f);
    if (!runs.empty()) fill(s, runs, out);
  };
}

std::size_t global_numel(const std::vector<UnitSpec>& units) {
  std::size_t n = 0;
  for (const UnitSpec& u : units)
    for (const SlotSpec& s : u.slots) n += s.tp.replicated() ? shape_numel(s.shape) : shape_numel(s.tp.global_shape);
  return n;
}

}  // namespace strata
