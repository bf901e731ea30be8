# bf16 compute composed with every parallelism, through train_gpt (cmake -P): each layout below trains 20 steps with
# --param-dtype bf16 (so bf16 storage, gathers and products) on the same global batch of 8 rows, against the 1-rank
# run with the same flags. Splitting a sum differently moves an f32 result by round-off, and the next product
# rounds it to bf16, so the layouts cannot repeat one rank's losses to f32 round-off as the f32 layouts do; they
# must stay within 1e-4 relative per step (measured: at most 3.4e-5) and their gradient norms within 5e-3 (measured:
# at most 1.6e-3). This guards the composition: every layout runs bf16 (its log says so) and stays at bf16's noise
# level. An f32 run would pass that bar too (5e-5 from the 1-rank bf16 run), so each run must also be further than
# f32 round-off (1e-5) from the 1-rank f32 run of the same flags, which every f32 layout equals within 1e-5
# (tp_runs.cmake, pp_runs.cmake). Whether the products themselves are bf16 is held by
# Bf16ComputeAgreesWithPyTorchAutocast (test_gpt_training.cc).
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCOMPARE=<compare_runs>
# -DWORK=<scratch directory, emptied>.

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

set(common --steps 20 --no-progress --heads 4 --embd 32 --seq 8 --lr 1e-3)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# run_gpt(<name> <np> <bf16|f32> flags...): --param-dtype as given (compute follows it).
function(run_gpt name np dtype)
  set(argv ${launcher} -n ${np} ${TRAIN_GPT} ${common} --param-dtype ${dtype} --metrics ${WORK}/${name}.jsonl ${ARGN})
  set(says "compute bf16 \\(f32 accumulation; ")
  if(dtype STREQUAL "f32")
    set(says "compute f32")
  endif()
  execute_process(COMMAND ${argv} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
  file(WRITE "${WORK}/${name}.log" "${argv}\nrc ${rc}\n${out}\n${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: failed (${rc}): ${argv}\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "${says}")
    message(FATAL_ERROR "${name}: the log does not say '${says}':\n${out}")
  endif()
endfunction()

run_gpt(ref 1 bf16 --batch 8 --zero-stage 3)
run_gpt(ref_f32 1 f32 --batch 8 --zero-stage 3)

# name | np | flags (',' for ' ')
set(layouts
  "dp2_zero3|2|--zero-stage,3,--batch,4"
  "dp2_zero1|2|--zero-stage,1,--batch,4"
  "tp2_sp|2|--tp,2,--sequence-parallel,--batch,8"
  "pp2_1f1b|2|--pp,2,--microbatches,2,--batch,8"
  "tp2_dp2_zero3|4|--tp,2,--zero-stage,3,--batch,4"
  "pp2_tp2|4|--pp,2,--tp,2,--microbatches,2,--batch,8")
set(failed)
foreach(layout IN LISTS layouts)
  unpack_row("${layout}" name np flags)
  run_gpt(${name} ${np} bf16 ${flags})
  compare_to(${name} ref 1e-4 5e-3)
  expect_differs(${name} ref_f32 1e-5)
endforeach()
expect_differs(ref ref_f32 1e-5)
if(failed)
  message(FATAL_ERROR "bf16 layouts that differ from the 1-rank bf16 run, or equal the f32 one: ${failed}")
endif()
