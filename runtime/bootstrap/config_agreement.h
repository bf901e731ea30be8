// check_config_agreement: every rank must run with the same effective configuration; a difference is an error on
// every rank naming each differing field, its values and the ranks holding each.
#pragma once

#include <string>
#include <vector>

namespace strata {

// One setting of the run: a flag's name ("--lr") and its effective value as text ("0.001").
struct ConfigField {
  std::string name;
  std::string value;
};

// Collective over MPI_COMM_WORLD, bounded by STRATA_TIMEOUT_S: every rank sends one hash of its field names and
// one hash per field; when any differ, the value text of the differing fields (each cut to 200 characters) is
// exchanged and every rank throws kMismatch:
//   "configuration differs across ranks: --lr: 0.001 on ranks 0,2; 0.002 on rank 1"
// (one line per field when several differ). STRATA_VALIDATE is added to the fields: ranks that disagree on it
// would pair a validated collective with an unvalidated one. List only settings that must agree; values that may
// legitimately differ per rank (a per-node scratch path) do not belong here. A single rank returns at once.
void check_config_agreement(const std::vector<ConfigField>& fields);

// The message for fields gathered from every rank (index = rank), or "" when all agree; the pure part of
// check_config_agreement, for tests.
std::string describe_config_differences(const std::vector<std::vector<ConfigField>>& per_rank);

}  // namespace strata
