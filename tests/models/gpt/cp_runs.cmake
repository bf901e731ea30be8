# Context-parallel runs of train_gpt under mpiexec against the 1-rank run (cmake -P), at sequence 1024: cp 2, cp 4,
# cp 2 x dp 2, cp 2 x tp 2, cp 2 x pp 2 (1F1B), ZeRO 0-3, recomputation and accumulation each train 20 steps on the
# same 4 rows a step; their losses must equal the 1-rank run's within 1e-5 relative, their gradient norms within 1e-6,
# and their final parameters (--save) within 1e-5 tensor-wise (compare_runs); cp 2 in bf16 is held to the
# 1-rank bf16 run at bf16_runs.cmake's bars. Each run's step-0 memory on rank 0 must be the planner's, category by
# category, the activations fall as 1 / cp, and every step's bytes sent round the ring (cp_bytes) are
# predict_cp_bytes'. A checkpoint saved at cp 2 resumes at cp 1 and the reverse (steps 10-19 within 1e-5 of the
# uninterrupted run). Then bad layouts: each must fail before any step with a message naming the values.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCOMPARE=<compare_runs>
# -DWORK=<scratch directory, emptied>.

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

set(common --steps 20 --no-progress --heads 4 --embd 32 --seq 1024 --ctx 1024)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# run_gpt(<name> <np> args...): the run, its metrics and weights in WORK; <name>_activations: rank 0's step-0
# activation bytes, after checking that its step-0 memory equals the prediction in every category (a resumed run,
# which has no step 0, is not checked).
function(run_gpt name np)
  train_saved(${name} ${np} ${ARGN})
  set(out "${${name}_out}")
  # Every step's ring traffic is the prediction's (and there is some under cp).
  file(STRINGS ${WORK}/${name}.jsonl records)
  foreach(record IN LISTS records)
    if(NOT record MATCHES "\"cp_bytes\":([0-9]+)" )
      message(FATAL_ERROR "${name}: a record without cp_bytes: ${record}")
    endif()
    set(sent ${CMAKE_MATCH_1})
    string(REGEX MATCH "\"predicted_cp_bytes\":([0-9]+)" _ "${record}")
    set(predicted_bytes "${CMAKE_MATCH_1}")
    if(NOT sent STREQUAL predicted_bytes OR ("${ARGN}" MATCHES "--cp;[2-9]" AND sent EQUAL 0))
      message(FATAL_ERROR "${name}: the ring sent ${sent} bytes in a step, predicted ${predicted_bytes}: ${record}")
    endif()
  endforeach()
  if(out MATCHES "resumed from")
    return()
  endif()
  if(NOT out MATCHES "\"step0_memory_rank0\":{\"measured\":({[^}]*}),\"predicted\":({[^}]*})}")
    message(FATAL_ERROR "${name}: no step-0 memory in the summary:\n${out}")
  endif()
  set(measured "${CMAKE_MATCH_1}")
  set(predicted "${CMAKE_MATCH_2}")
  if(NOT measured STREQUAL predicted)
    message(FATAL_ERROR "${name}: step-0 memory differs from the prediction:\n measured  ${measured}\n predicted ${predicted}")
  endif()
  string(REGEX MATCH "\"activations\":([0-9]+)" _ "${measured}")
  set(${name}_activations ${CMAKE_MATCH_1} PARENT_SCOPE)
  message(STATUS "${name}: step-0 memory as predicted, activations ${CMAKE_MATCH_1} bytes on rank 0")
endfunction()

run_gpt(ref 1 --batch 4)
# name | np | flags (',' for ' ')
set(layouts
  "cp2|2|--cp,2,--batch,4"
  "cp4|4|--cp,4,--batch,4"
  "cp2_dp2_zero3|4|--cp,2,--batch,2"
  "cp2_zero0|2|--cp,2,--batch,4,--zero-stage,0"
  "cp2_zero1|2|--cp,2,--batch,4,--zero-stage,1"
  "cp2_recompute_attention|2|--cp,2,--batch,4,--recompute,attention"
  "cp2_recompute_full_accum|2|--cp,2,--batch,2,--grad-accum,2,--recompute"
  "cp2_tp2|4|--cp,2,--tp,2,--batch,4"
  "cp2_pp2|4|--cp,2,--pp,2,--batch,4")
set(failed)
foreach(layout IN LISTS layouts)
  unpack_row("${layout}" name np flags)
  run_gpt(${name} ${np} ${flags})
  compare_to(${name} ref 1e-5 1e-6 1e-5)
endforeach()
# bf16 (storage, gathers and products: --param-dtype bf16): against the 1-rank bf16 run at bf16's noise (bf16_runs.cmake's
# bars: losses 1e-4, norms 5e-3), and further than f32 round-off from the f32 run (so it really ran in bf16).
run_gpt(ref_bf16 1 --batch 4 --param-dtype bf16)
run_gpt(cp2_bf16 2 --cp 2 --batch 4 --param-dtype bf16)
compare_to(cp2_bf16 ref_bf16 1e-4 5e-3)
expect_differs(cp2_bf16 ref 1e-5)
if(failed)
  message(FATAL_ERROR "layouts that differ from the 1-rank run: ${failed}")
endif()
# The activations are each rank's rows: half at cp 2, a quarter at cp 4 (the ring's buffers are comm_buffer and
# workspace).
math(EXPR half "${ref_activations} / 2")
math(EXPR quarter "${ref_activations} / 4")
if(NOT cp2_activations EQUAL half OR NOT cp4_activations EQUAL quarter)
  message(FATAL_ERROR "activations ${ref_activations} / ${cp2_activations} / ${cp4_activations} at cp 1 / 2 / 4: "
                      "expected ${half} and ${quarter} at cp 2 and 4")
endif()

# A checkpoint crosses cp degrees: saved at step 10 at cp 2, resumed at cp 1; saved at cp 1, resumed at cp 2.
read_metrics(ref ${WORK}/ref.jsonl)
foreach(pair "cp2_to_cp1|2|1" "cp1_to_cp2|1|2")
  unpack_row("${pair}" name cp_save cp_resume)
  run_gpt(${name}_saved ${cp_save} --batch 4 --stop-at 10 --checkpoint-dir ${WORK}/${name} --cp ${cp_save})
  run_gpt(${name} ${cp_resume} --batch 4 --checkpoint-dir ${WORK}/${name} --resume --cp ${cp_resume})
  read_metrics(${name} ${WORK}/${name}.jsonl)
  expect_steps(${name} ref 10 19 relative)
endforeach()

# Bad layouts: an error that names the values, on every rank before any step.
# name | np | expected text | flags
set(bad
  "world|4|--cp 3 x --tp 1 x --pp 1 does not divide the world size 4|--cp,3"
  "seq|4|--seq 1020 must divide by 2 x --cp = 8|--cp,4,--seq,1020"
  "sp|4|context parallelism does not compose with sequence parallelism yet|--cp,2,--tp,2,--sequence-parallel")
foreach(case IN LISTS bad)
  unpack_row("${case}" name np text flags)
  refused_layout(${name} ${np} "${text}" ${common} --steps 2 ${flags})
endforeach()
