# scripts/scale.py on a small grid (cmake -P): np 1 and 2, dp and pp 2, weak scaling, 3 steps. The CSV holds one row
# per run that fits (dp at np 1 and 2, pp 2 at np 2) with numbers in every column, the planner's total beside the
# measured one, and a rerun adds no row (the sweep resumes, it does not repeat). Then the hostfile placement.
# -DTRAIN_GPT=<binary, in <build>/bin> -DWORK=<scratch directory, emptied>.
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
get_filename_component(bin_dir "${TRAIN_GPT}" DIRECTORY)
get_filename_component(build_dir "${bin_dir}" DIRECTORY)
set(scale ${CMAKE_CURRENT_LIST_DIR}/../../../scripts/scale.py)
set(grid --np 1,2 --layouts dp,pp2 --models tiny --scaling weak --steps 3 --build ${build_dir} --out ${WORK}/sweep)
run_checked(sweep ok 300 python3 ${scale} ${grid})
expect_text(sweep "scale.py: 3 rows in")
file(STRINGS ${WORK}/sweep/scaling.csv lines)
list(LENGTH lines n)
if(NOT n EQUAL 4)
  message(FATAL_ERROR "sweep: scaling.csv has ${n} lines, not a header and 3 rows:\n${lines}")
endif()
list(GET lines 0 header)
string(REPLACE "," ";" header "${header}")
list(FIND header step0_measured_mib measured_at)
list(FIND header step0_predicted_mib predicted_at)
list(FIND header tokens_per_s tokens_at)
foreach(k 1 2 3)
  list(GET lines ${k} row)
  string(REPLACE "," ";" row "${row}")
  list(GET row ${tokens_at} tokens)
  list(GET row ${measured_at} measured)
  list(GET row ${predicted_at} predicted)
  if(NOT tokens MATCHES "^[0-9.]+$" OR tokens EQUAL 0 OR NOT measured STREQUAL predicted)
    message(FATAL_ERROR "sweep: row ${k}: tokens/s '${tokens}', memory measured ${measured} vs predicted ${predicted} MiB")
  endif()
endforeach()
run_checked(resume ok 120 python3 ${scale} ${grid})
expect_text(resume "have tiny weak dp np 1" "have tiny weak pp2 np 2" "scale.py: 3 rows in")
string(FIND "${resume_out}" "launch.sh" ran)
if(NOT ran EQUAL -1)
  message(FATAL_ERROR "resume: a rerun launched a run it already had:\n${resume_out}")
endif()

# Across nodes through launch.sh: a hostfile of one host (this one) at 2 ranks per node runs np 1 and 2 there, leaves
# np 3 out (it fills no whole node), and stops at np 4 (2 nodes, one listed) naming the count.
file(WRITE ${WORK}/hosts "# one node\nlocalhost\n")
set(hosts_grid --hostfile ${WORK}/hosts --ranks-per-node 2 --layouts dp --models tiny --scaling weak --steps 3
    --build ${build_dir})
run_checked(hosts ok 300 python3 ${scale} ${hosts_grid} --np 1,2,3 --out ${WORK}/hosts_sweep)
expect_text(hosts "launch.sh --hostfile" "--ranks-per-node 2 --" "np 3 is neither at most --ranks-per-node 2"
            "scale.py: 2 rows in")
run_checked(too_few_hosts fail 120 python3 ${scale} ${hosts_grid} --np 4 --out ${WORK}/hosts_sweep4)
expect_text(too_few_hosts "np 4 needs 2 nodes of 2 ranks")
