# Sizes are named (cmake -P): collectives_bench asked for 100 GiB buffers at np 2 fails at once on every rank, naming
# the size and the machine's memory (before: a bare std::bad_alloc after the shared-memory buffers, which reserve
# nothing, had been "allocated").
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DBENCH=<collectives_bench>.
string(REPLACE "|" ";" launcher "${MPIEXEC}")
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
run_checked(bench_100g fail 30 ${launcher} -n 2 ${BENCH} -b 100G -e 100G -n 1 -w 0)
expect_text(bench_100g "--maxbytes 107374182400: the benchmark's buffers (3 of 100.0 GiB (107374182400 bytes) each): "
                       "300.0 GiB (322122547200 bytes) is more than this machine's memory")
if(bench_100g_out MATCHES "bad_alloc")
  message(FATAL_ERROR "bench_100g: a bare bad_alloc:\n${bench_100g_out}")
endif()
