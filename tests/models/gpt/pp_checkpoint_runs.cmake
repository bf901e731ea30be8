# Checkpoints of pipeline-parallel train_gpt runs under mpiexec (cmake -P): a run at np 2, --pp 2 stopped at step 10
# resumes at pp 2 (bit for bit), pp 1, pp 4, pp 2 x dp 2 (ZeRO 1), pp 2 x tp 2 and tp 2 alone, each with the same global
# rows (8 a step in 4 micro-batches): steps 10-19 equal the uninterrupted run's within 1e-5 relative (loss and
# grad_norm). A run at np 1 stopped at step 10 resumes at pp 2 and pp 4 within 1e-5.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>.
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

set(common --steps 20 --no-progress --layers 4 --heads 4 --embd 32 --vocab 65 --microbatches 4)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(run_gpt name np)
  run_checked(${name} ok 120 ${launcher} -n ${np} ${TRAIN_GPT} ${common} --metrics ${WORK}/${name}.jsonl ${ARGN})
  set(${name}_out "${${name}_out}" PARENT_SCOPE)
endfunction()

# resume_all(<saved> <straight> entries...): an entry is "np|flags,..." (',' for ' '), ending in "|exact" for bitwise.
function(resume_all saved straight)
  foreach(entry IN LISTS ARGN)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 np)
    list(GET fields 1 flags)
    set(how relative)
    list(LENGTH fields n)
    if(n GREATER 2)
      set(how exact)
    endif()
    string(REGEX REPLACE "[^A-Za-z0-9]+" "_" tag "${saved}_np${np}${flags}")
    string(REPLACE "," ";" flags "${flags}")
    file(COPY ${WORK}/${saved}/ DESTINATION ${WORK}/${tag})
    run_gpt(${tag} ${np} ${flags} --checkpoint-dir ${WORK}/${tag} --resume)
    expect_in(${tag} "resumed from ${WORK}/${tag}/step-00000010")
    read_metrics(${tag} ${WORK}/${tag}.jsonl)
    expect_steps(${tag} ${straight} 10 19 ${how})
  endforeach()
endfunction()

# Saved at pp 2.
run_gpt(straight_pp2 2 --pp 2 --batch 8)
read_metrics(straight_pp2 ${WORK}/straight_pp2.jsonl)
run_gpt(stopped_pp2 2 --pp 2 --batch 8 --stop-at 10 --checkpoint-dir ${WORK}/ckpt_pp2)
read_metrics(stopped_pp2 ${WORK}/stopped_pp2.jsonl)
expect_steps(stopped_pp2 straight_pp2 0 9 exact)
resume_all(ckpt_pp2 straight_pp2
           "2|--pp,2,--batch,8|exact" "1|--batch,8" "4|--pp,4,--batch,8" "4|--pp,2,--batch,4,--zero-stage,1"
           "4|--pp,2,--tp,2,--batch,8" "2|--tp,2,--batch,8")

# Saved at pp 1 (one rank), resumed as pipelines.
run_gpt(straight_pp1 1 --batch 8)
read_metrics(straight_pp1 ${WORK}/straight_pp1.jsonl)
run_gpt(stopped_pp1 1 --batch 8 --stop-at 10 --checkpoint-dir ${WORK}/ckpt_pp1)
resume_all(ckpt_pp1 straight_pp1 "2|--pp,2,--batch,8" "4|--pp,4,--pp-schedule,gpipe,--batch,8")
