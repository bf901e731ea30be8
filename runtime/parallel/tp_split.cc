// TpSplit: local shapes and the local-to-global element map of a tensor-parallel slice.
#include "runtime/parallel/tp_split.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace strata {

std::string TpSplit::describe() const {
  if (replicated()) return "replicated";
  const std::string atoms = atom > 0 ? fmt::format(", atoms of {}", atom) : "";
  if (!part_sizes.empty())
    return fmt::format("dim {} in parts {} of [{}]{}", dim, fmt::join(part_sizes, " + "), fmt::join(global_shape, ", "),
                       atoms);
  return fmt::format("dim {} in {} part{} of [{}]", dim, parts, parts == 1 ? "" : "s", fmt::join(global_shape, ", "));
}

std::vector<std::int64_t> TpSplit::local_shape(int tp) const {
  if (replicated()) return global_shape;
  std::vector<std::int64_t> s = global_shape;
  s[static_cast<std::size_t>(dim)] = static_cast<std::int64_t>(geometry(tp).local);
  return s;
}

TpGeometry TpSplit::geometry(int tp) const {
  TpGeometry g;
  const std::size_t d = static_cast<std::size_t>(dim), t = static_cast<std::size_t>(tp);
  for (std::size_t i = d + 1; i < global_shape.size(); ++i) g.inner *= static_cast<std::size_t>(global_shape[i]);
  g.global = static_cast<std::size_t>(global_shape[d]);
  std::vector<std::size_t> sizes;
  if (part_sizes.empty())
    sizes.assign(static_cast<std::size_t>(parts), g.global / static_cast<std::size_t>(parts));
  else
    for (std::int64_t n : part_sizes) sizes.push_back(static_cast<std::size_t>(n));
  std::size_t global_at = 0;
  for (std::size_t n : sizes) {
    g.block.push_back(n);
    // A part of fewer atoms than ranks: one atom a piece, each held by tp / atoms ranks.
    const std::size_t atoms = atom > 0 ? n / static_cast<std::size_t>(atom) : t;
    g.share.push_back(atoms < t ? t / atoms : 1);
    g.piece.push_back(atoms < t ? static_cast<std::size_t>(atom) : (n + t - 1) / t);
    g.global_begin.push_back(global_at);
    g.local_begin.push_back(g.local);
    global_at += n;
    g.local += g.piece.back();
  }
  return g;
}

std::size_t TpGeometry::part_of_local(std::size_t j) const {
  std::size_t p = 0;
  while (p + 1 < local_begin.size() && j >= local_begin[p + 1]) ++p;
  return p;
}

std::size_t TpGeometry::part_of_global(std::size_t j) const {
  std::size_t p = 0;
  while (p + 1 < global_begin.size() && j >= global_begin[p + 1]) ++p;
  return p;
}

void TpSplit::validate(const std::string& what, int tp) const {
  if (replicated()) return;
  STRATA_CHECK(tp >= 1, "{}: tensor-parallel degree {} must be at least 1", what, tp);
  STRATA_CHECK(dim < static_cast<int>(global_shape.size()), "{}: split dimension {} of a {}-D tensor", what, dim,
               global_shape.size());
  const std::int64_t n = global_shape[static_cast<std::size_t>(dim)];
  STRATA_CHECK(atom >= 0, "{}: atom {} along dimension {}", what, atom, dim);
  if (!part_sizes.empty()) {
    std::int64_t sum = 0;
    for (std::int64_t p : part_sizes) {
      if (atom > 0) {  // whole atoms, their count a multiple or a divisor of tp
        STRATA_CHECK(p >= 1 && p % atom == 0 && ((p / atom) % tp == 0 || tp % (p / atom) == 0),
                     "{}: part of {} along dimension {} is {} atoms of {}, a count that neither divides by the "
                     "tensor-parallel degree {} nor divides it (parts {})",
                     what, p, dim, p / atom, atom, tp, fmt::join(part_sizes, " + "));
        sum += p;
        continue;
      }
      STRATA_CHECK(p >= 1 && p % tp == 0,
                   "{}: part of {} along dimension {} must be positive and divide by the tensor-parallel degree {} "
                   "(parts {})",
                   what, p, dim, tp, fmt::join(part_sizes, " + "));
      sum += p;
    }
    STRATA_CHECK(sum == n, "{}: parts {} add up to {}, not dimension {}'s {}", what, fmt::join(part_sizes, " + "), sum,
                 dim, n);
    return;
  }
  STRATA_CHECK(atom == 0, "{}: atoms of {} are taken with part sizes only", what, atom);
  STRATA_CHECK(parts >= 1, "{}: {} parts", what, parts);
  STRATA_CHECK(n % parts == 0, "{}: dimension {} of size {} is not {} equal parts", what, dim, n, parts);
  STRATA_CHECK(parts == 1 || (n / parts) % tp == 0,
               "{}: each of the {} parts of dimension {} ({}) must divide by the tensor-parallel degree {}", what,
               parts, dim, n / parts, tp);
}

void for_each_global_run(const TpSplit& split, int rank, int tp, std::size_t begin, std::size_t count,
                         const std::function<void(std::size_t, std::size_t, std::size_t)>& fn, bool owned_only) {
  if (count == 0) return;
  if (split.replicated() || tp == 1) {  // one rank holds every part whole, unpadded: local is global
    fn(begin, begin, count);
    return;
  }
  // Row-major: an element is (outer, j, inner) with j its index along `dim` (local size L, global size G).
  const TpGeometry geo = split.geometry(tp);
  const std::size_t inner = geo.inner, G = geo.global, L = geo.local;
  const std::size_t end = begin + count;
  std::size_t run_local = 0, run_global = 0, run_len = 0;
  auto flush = [&] {
    if (run_len) fn(run_local, run_global, run_len);
    run_len = 0;
  };
  // Walk in pieces of `inner` elements (one index j along dim): each maps to a contiguous global run or to padding.
  std::size_t k = begin;
  while (k < end) {
    const std::size_t o = k / (L * inner), j = (k / inner) % L, i = k % inner;
    const std::size_t len = std::min(inner - i, end - k);
    const std::size_t p = geo.part_of_local(j), w = j - geo.local_begin[p], first = geo.first(p, rank);
    const std::size_t gj = geo.global_begin[p] + first + w;
    if (first + w >= geo.block[p] || (owned_only && !geo.owns(p, rank))) {  // padding (only with one part), or shared
      flush();
    } else {
      const std::size_t gk = (o * G + gj) * inner + i;
      if (run_len && run_global + run_len == gk && run_local + run_len == k) {
        run_len += len;
      } else {
        flush();
        run_local = k;
        run_global = gk;
        run_len = len;
      }
    }
    k += len;
  }
  flush();
}

}  // namespace strata
