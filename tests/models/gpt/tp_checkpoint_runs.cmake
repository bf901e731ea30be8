# Checkpoints of tensor-parallel train_gpt runs under mpiexec (cmake -P, so no other interpreter is needed):
#   a run at np 2, --tp 2 stopped at step 10 resumes at np 1 (tp 1), np 4 (tp 4), np 4 (tp 2 x dp 2, at ZeRO 3 and
#   ZeRO 1) and np 2 (tp 2, sequence parallel), each with the same global batch: steps 10-19 equal the uninterrupted
#   run's within 1e-5 relative (loss and grad_norm); resumed at its own layout, bit for bit. A run at np 1 stopped at
#   step 10 resumes at tp 2 and tp 4 within 1e-5. The vocabulary, 65, divides by neither 2 nor 4 (padded wte slices).
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>.

# 4 heads so that tp 4 holds whole heads; the global batch is (np / tp) x --batch = 6 rows of 8 tokens a step.
set(common --steps 20 --no-progress --prefetch 1 --heads 4 --embd 32 --vocab 65)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# run_gpt(<name> <np> args...): runs train_gpt, which must succeed; sets <name>_out (stdout and stderr).
function(run_gpt name np)
  set(argv ${launcher} -n ${np} ${TRAIN_GPT} ${common} ${ARGN})
  execute_process(COMMAND ${argv} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
  set(text "${out}\n${err}")
  file(WRITE "${WORK}/${name}.log" "${argv}\nrc ${rc}\n${text}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: failed (${rc}): ${argv}\n${text}")
  endif()
  set(${name}_out "${text}" PARENT_SCOPE)
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

# resume_all(<saved> <straight> <list of "np;tp;batch;flags..." as "|"-joined entries>): each resume starts from a copy
# of WORK/<saved> and must equal metrics <straight> from step 10 (within 1e-5; bitwise when the entry ends in "exact").
function(resume_all saved straight)
  foreach(entry IN LISTS ARGN)
    string(REPLACE "|" ";" resume "${entry}")
    set(how relative)
    list(GET resume -1 last)
    if(last STREQUAL "exact")
      set(how exact)
      list(POP_BACK resume)
    endif()
    list(POP_FRONT resume np tp batch)
    string(REPLACE ";" "_" tag "${saved}_np${np}_tp${tp}_${resume}")
    string(REGEX REPLACE "[-_]+" "_" tag "${tag}")
    string(REGEX REPLACE "_$" "" tag "${tag}")
    file(COPY ${WORK}/${saved}/ DESTINATION ${WORK}/${tag})
    run_gpt(${tag} ${np} --tp ${tp} --batch ${batch} ${resume} --checkpoint-dir ${WORK}/${tag} --resume
            --metrics ${WORK}/${tag}.jsonl)
    expect_in(${tag} "resumed from ${WORK}/${tag}/step-00000010")
    read_metrics(${tag} ${WORK}/${tag}.jsonl)
    expect_steps(${tag} ${straight} 10 19 ${how})
  endforeach()
endfunction()

# Saved at tp 2.
run_gpt(straight_tp2 2 --tp 2 --batch 6 --metrics ${WORK}/straight_tp2.jsonl)
read_metrics(straight_tp2 ${WORK}/straight_tp2.jsonl)
run_gpt(stopped_tp2 2 --tp 2 --batch 6 --stop-at 10 --checkpoint-dir ${WORK}/ckpt_tp2
        --metrics ${WORK}/stopped_tp2.jsonl)
read_metrics(stopped_tp2 ${WORK}/stopped_tp2.jsonl)
expect_steps(stopped_tp2 straight_tp2 0 9 exact)
resume_all(ckpt_tp2 straight_tp2
           "2|2|6|exact" "1|1|6" "4|4|6" "4|2|3" "4|2|3|--zero-stage|1" "2|2|6|--sequence-parallel")

# Saved at tp 1.
run_gpt(straight_tp1 1 --tp 1 --batch 6 --metrics ${WORK}/straight_tp1.jsonl)
read_metrics(straight_tp1 ${WORK}/straight_tp1.jsonl)
run_gpt(stopped_tp1 1 --tp 1 --batch 6 --stop-at 10 --checkpoint-dir ${WORK}/ckpt_tp1
        --metrics ${WORK}/stopped_tp1.jsonl)
read_metrics(stopped_tp1 ${WORK}/stopped_tp1.jsonl)
expect_steps(stopped_tp1 straight_tp1 0 9 exact)
resume_all(ckpt_tp1 straight_tp1 "2|2|6" "4|4|6" "4|2|3|--zero-stage|0")

file(REMOVE_RECURSE "${WORK}")
message(STATUS "tp checkpoint runs: passed")
