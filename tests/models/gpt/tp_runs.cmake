# Tensor-parallel runs of train_gpt under mpiexec against the 1-rank run (cmake -P):
#   every layout below trains 20 steps on the same global batch of 12 rows; its losses must equal the 1-rank run's
#   within 1e-5 relative, its gradient norms within 1e-6, and its final parameters (--save) within 1e-5 tensor-wise
#   (compare_runs: Frobenius norm of the difference over that of the tensor). 1e-5, not 1e-6: after 20 AdamW steps
#   plain data parallelism is itself up to 6e-6 from one rank (np 4, vocab 65, h.1.mlp.c_proj.weight), since AdamW
#   divides each gradient by its own magnitude and so carries the round-off of small gradients into the weights.
#   Then bad layouts: each must fail with a message naming the values.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCOMPARE=<compare_runs>
# -DWORK=<scratch directory, emptied>.

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

# heads 4 so that tp 4 holds a whole head per rank; 12 rows of 8 tokens a step.
set(common --steps 20 --no-progress --heads 4 --embd 32 --seq 8)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# The references: one rank, 12 rows (vocab 64, and 65 which divides by neither 2 nor 4).
foreach(vocab 64 65)
  train_saved(ref_v${vocab} 1 --batch 12 --vocab ${vocab})
endforeach()

# name | np | vocab | flags (',' for ' ')
set(layouts
  "tp2|2|64|--tp,2,--batch,12"
  "tp2_sp|2|64|--tp,2,--sequence-parallel,--batch,12"
  "tp2_dp2_zero1|4|64|--tp,2,--zero-stage,1,--batch,6"
  "tp2_dp2_zero1_sp|4|64|--tp,2,--zero-stage,1,--sequence-parallel,--batch,6"
  "tp2_dp2_zero3|4|64|--tp,2,--zero-stage,3,--batch,6"
  "tp2_dp2_zero3_sp|4|64|--tp,2,--zero-stage,3,--sequence-parallel,--batch,6"
  "tp4|4|64|--tp,4,--batch,12"
  "tp4_sp|4|64|--tp,4,--sequence-parallel,--batch,12"
  "tp2_vocab65|2|65|--tp,2,--batch,12"
  "tp2_vocab65_sp|2|65|--tp,2,--sequence-parallel,--batch,12"
  "tp4_vocab65_sp|4|65|--tp,4,--sequence-parallel,--batch,12"
  "tp2_dp2_vocab65_recompute_accum|4|65|--tp,2,--batch,3,--grad-accum,2,--recompute,--sequence-parallel")
set(failed)
foreach(layout IN LISTS layouts)
  unpack_row("${layout}" name np vocab flags)
  train_saved(${name} ${np} --vocab ${vocab} ${flags})
  compare_to(${name} ref_v${vocab} 1e-5 1e-6 1e-5)
endforeach()
if(failed)
  message(FATAL_ERROR "layouts that differ from the 1-rank run: ${failed}")
endif()

# Bad layouts: an error that names the values, from every rank (each rank checks before allocating anything). embd
# needs no case of its own: heads dividing by tp makes embd = heads x head size divide too.
# name | np | expected text | flags
set(bad
  "heads|4|--heads 2 must divide by --tp 4|--heads,2,--tp,4"
  "sp_without_tp|2|--sequence-parallel needs --tp 2 or more|--sequence-parallel"
  "seq|2|--seq 7 must divide by --tp 2 under --sequence-parallel|--seq,7,--tp,2,--sequence-parallel"
  "world|4|--tp 3 does not divide the world size 4|--heads,3,--embd,33,--tp,3")
foreach(case IN LISTS bad)
  unpack_row("${case}" name np text flags)
  refused_layout(${name} ${np} "${text}" --steps 2 --no-progress ${flags})
endforeach()
