# Start-up configuration agreement through the tools, launched MPMD with one setting differing on rank 1
# (cmake -P, so no other interpreter is needed):
#   -DMODE=lr              train_gpt --lr 1e-3 on rank 0, 2e-3 on rank 1 (and first the same flags on both: it trains)
#   -DMODE=steps           train_gpt --steps 3 on rank 0, 2 on rank 1
#   -DMODE=custom_trainer  custom_trainer --lr 0.01 on rank 0, 0.02 on rank 1
#   -DMODE=env_<VAR>       STRATA_SHM=0, STRATA_SHM_IN_PLACE=0, STRATA_TRACE=<file>, STRATA_RANKS_PER_NODE=1 or
#                          STRATA_COMM=mpi-staged on rank 0 only (train_gpt): the start-up agreement names the
#                          variable, both values and the ranks (before: a full STRATA_TIMEOUT_S wait or an internal
#                          message)
# A differing run must fail before any step, with a message naming the setting, both values and the ranks.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCUSTOM_TRAINER=<binary>.
string(REPLACE "|" ";" launcher "${MPIEXEC}")
set(gpt_common --no-progress --steps 3 --tokens 4096)

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

# run_mpmd(<expect: ok|fail> <rank 0 command list name> <rank 1 command list name>): sets `out` in the caller.
function(run_mpmd expect rank0_var rank1_var)
  run_checked(mpmd ${expect} 90 ${launcher} -n 1 ${${rank0_var}} : -n 1 ${${rank1_var}})
  set(out "${mpmd_out}" PARENT_SCOPE)
endfunction()

# expect_says(<text>...): every text appears in `out`, and no step ran.
function(expect_says)
  foreach(t IN LISTS ARGN)
    string(FIND "${out}" "${t}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the output does not say '${t}':\n${out}")
    endif()
  endforeach()
  if(out MATCHES "(^|\n)step +0 ")
    message(FATAL_ERROR "a step ran although the configurations differ:\n${out}")
  endif()
endfunction()

if(MODE STREQUAL "lr")
  set(same ${TRAIN_GPT} ${gpt_common} --lr 1e-3)
  run_mpmd(ok same same)
  set(other ${TRAIN_GPT} ${gpt_common} --lr 2e-3)
  run_mpmd(fail same other)
  expect_says("configuration differs across ranks: --lr: 0.001 on rank 0; 0.002 on rank 1")
elseif(MODE STREQUAL "steps")
  set(first ${TRAIN_GPT} ${gpt_common} --steps 3)
  set(second ${TRAIN_GPT} ${gpt_common} --steps 2)
  run_mpmd(fail first second)
  expect_says("configuration differs across ranks: --steps: 3 on rank 0; 2 on rank 1")
elseif(MODE STREQUAL "custom_trainer")
  set(first ${CUSTOM_TRAINER} --steps 2 --lr 0.01)
  set(second ${CUSTOM_TRAINER} --steps 2 --lr 0.02)
  run_mpmd(fail first second)
  expect_says("configuration differs across ranks: --lr: 0.01 on rank 0; 0.02 on rank 1")
elseif(MODE MATCHES "^env_(.*)$")
  set(var STRATA_${CMAKE_MATCH_1})
  set(values SHM=0 SHM_IN_PLACE=0 TRACE=${CMAKE_CURRENT_BINARY_DIR}/agreement_trace.json RANKS_PER_NODE=1
             COMM=mpi-staged)
  set(shown "SHM=0|1" "SHM_IN_PLACE=0|1" "TRACE=${CMAKE_CURRENT_BINARY_DIR}/agreement_trace.json|(off)"
            "RANKS_PER_NODE=1|(the nodes MPI reports)" "COMM=mpi-staged|auto")
  list(FILTER values INCLUDE REGEX "^${CMAKE_MATCH_1}=")
  list(FILTER shown INCLUDE REGEX "^${CMAKE_MATCH_1}=")
  string(REGEX REPLACE "^[A-Z_]+=" "" value "${values}")
  string(REGEX REPLACE "^[A-Z_]+=" "" shown "${shown}")
  string(REPLACE "|" ";" shown "${shown}")
  list(GET shown 0 on_rank0)
  list(GET shown 1 on_rank1)
  set(first ${CMAKE_COMMAND} -E env ${var}=${value} ${TRAIN_GPT} ${gpt_common})
  set(second ${TRAIN_GPT} ${gpt_common})
  run_mpmd(fail first second)
  expect_says("configuration differs across ranks: ${var}: ${on_rank0} on rank 0; ${on_rank1} on rank 1")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
