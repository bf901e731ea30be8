# Pipeline-parallel runs of train_gpt under mpiexec against the 1-rank run (cmake -P):
#   every layout trains 20 steps on the same global rows (8 per step, in 4 micro-batches of 2) with 8 layers; its
#   losses and gradient norms must equal the 1-rank run's within 1e-5 relative and its final parameters (--save)
#   within PARAM_TOL tensor-wise (compare_runs), or see `layouts` for those with dp or tp. Every schedule (gpipe, 1f1b, interleaved with 2 chunks per
#   rank) at pp 2, pp 4, pp 2 x dp 2 (ZeRO 1 and 3), pp 2 x tp 2 and pp 2 x tp 2 x dp 2; ZeRO-3 also with --pp-reshard.
#   The reference is one rank with the same 4 micro-batches (--microbatches 4), so the gradients are summed over the
#   micro-batches in the same order.
#   Then bad settings: each must fail on every rank before the first step with a message naming the values.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCOMPARE=<compare_runs>
# -DWORK=<scratch directory, emptied> [-DPARAM_TOL=1e-6] [-DDP_PARAM_TOL=5e-5] [-DONLY=<regex of layout names>]
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

if(NOT DEFINED PARAM_TOL)
  set(PARAM_TOL 1e-6)
endif()
set(common --steps 20 --no-progress --layers 8 --heads 4 --embd 32 --seq 8 --microbatches 4)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(run_gpt name np)
  run_checked(${name} ok 180 ${launcher} -n ${np} ${TRAIN_GPT} ${common} --metrics ${WORK}/${name}.jsonl
              --save ${WORK}/${name}.safetensors ${ARGN})
endfunction()

run_gpt(ref 1 --batch 8)

# name | np | the same layout without a pipeline ("ref": one rank) | flags (',' for ' '); each runs once per schedule.
# Layouts with data or tensor parallelism are held to the same layout at pp 1 at PARAM_TOL, and to one rank at
# DP_PARAM_TOL: dp and tp change the order of the sums, and after 20 AdamW steps that alone moves small tensors by
# ~1e-5 relative (here up to 1.5e-5, h.4.ln_2.bias, for dp 2 and tp 2 without any pipeline), while the pipeline adds
# under 1e-6 to whatever layout it runs in.
set(bases
  "dp2_zero1|2|--zero-stage,1,--batch,4"
  "dp2_zero3|2|--zero-stage,3,--batch,4"
  "dp2_zero3_reshard|2|--zero-stage,3,--batch,4,--pp-reshard"
  "tp2|2|--tp,2,--batch,8"
  "tp2_dp2|4|--tp,2,--batch,4")
set(layouts
  "pp2|2|ref|--pp,2,--batch,8"
  "pp4|4|ref|--pp,4,--batch,8"
  "pp2_dp2_zero1|4|dp2_zero1|--pp,2,--zero-stage,1,--batch,4"
  "pp2_dp2_zero3|4|dp2_zero3|--pp,2,--zero-stage,3,--batch,4"
  "pp2_tp2|4|tp2|--pp,2,--tp,2,--batch,8"
  "pp2_tp2_dp2|8|tp2_dp2|--pp,2,--tp,2,--batch,4")
if(NOT DEFINED DP_PARAM_TOL)
  set(DP_PARAM_TOL 5e-5)
endif()

set(failed)
foreach(base IN LISTS bases)
  unpack_row("${base}" name np flags)
  run_gpt(${name} ${np} ${flags})
endforeach()
foreach(layout IN LISTS layouts)
  unpack_row("${layout}" base np same flags)
  foreach(schedule gpipe 1f1b interleaved)
    set(name ${base}_${schedule})
    if(DEFINED ONLY AND NOT name MATCHES "${ONLY}")
      continue()
    endif()
    set(extra --pp-schedule ${schedule})
    if(schedule STREQUAL "interleaved")
      list(APPEND extra --pp-virtual 2)
    endif()
    run_gpt(${name} ${np} ${flags} ${extra})
    compare_to(${name} ${same} 1e-5 1e-5 ${PARAM_TOL})
    if(NOT same STREQUAL "ref")
      compare_to(${name} ref 1e-5 1e-5 ${DP_PARAM_TOL})
    endif()
  endforeach()
endforeach()
if(NOT DEFINED ONLY OR "pp2_dp2_zero3_reshard" MATCHES "${ONLY}")
  # The other ZeRO-3 mode: every micro-batch reduces and frees its units.
  run_gpt(pp2_dp2_zero3_reshard 4 --pp 2 --zero-stage 3 --batch 4 --pp-reshard)
  compare_to(pp2_dp2_zero3_reshard dp2_zero3_reshard 1e-5 1e-5 ${PARAM_TOL})
  compare_to(pp2_dp2_zero3_reshard ref 1e-5 1e-5 ${DP_PARAM_TOL})
endif()
if(failed)
  message(FATAL_ERROR "runs that differ from their reference: ${failed}")
endif()
