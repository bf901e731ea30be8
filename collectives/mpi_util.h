// Bounded MPI waits (poll a request, or several, until done or STRATA_TIMEOUT_S passes) and small MPI helpers.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata {

// Polls MPI_Test until `request` completes. Past `timeout_s` it throws kTimeout naming `what` and the in-flight
// table. Yields the core between polls so a computing thread on the same rank keeps running.
void mpi_wait(MPI_Request& request, double timeout_s, const std::string& what);
void mpi_wait_all(int n, MPI_Request* requests, double timeout_s, const std::string& what);

// This rank's rank in `comm`, and `comm`'s size.
int mpi_rank(MPI_Comm comm);
int mpi_size(MPI_Comm comm);

// `count` as MPI's int element count; kUnsupported naming `op` above INT_MAX.
int mpi_count(std::size_t count, const char* op);

// Each rank of `comm` as a rank of MPI_COMM_WORLD.
std::vector<int> world_ranks_of(MPI_Comm comm);

// The element type MPI moves for a DType (bf16 and f16 travel as 16-bit words).
MPI_Datatype mpi_datatype(DType dtype);

}  // namespace strata
