# Checkpoints of Llama-style train_gpt runs across layouts (cmake -P): the tiny reference model (4 heads over 2
# key-value heads, untied) at tp 2 x dp 2 (np 4) stopped at step 10 resumes at np 1, at pp 2 (np 2) and at tp 2 x dp 2
# itself, each with the same global batch of 4 rows: steps 10-19 equal the uninterrupted run's within 1e-5 relative
# (bit for bit at its own layout). test_llama holds the tp 2 run itself to the PyTorch reference.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>
# -DDATA=<tests/data>.
set(common --steps 20 --no-progress --family llama --layers 2 --embd 32 --heads 4 --kv-heads 2 --ffn 64 --vocab 64
    --ctx 16 --untied --seq 8 --lr 1e-2 --grad-clip 1.0 --recompute none --init ${DATA}/llama_tiny_init.safetensors
    --data ${DATA}/gpt_tiny_tokens.bin)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../gpt/gpt_run_checks.cmake)

run_checked(straight ok 120 ${launcher} -n 4 ${TRAIN_GPT} ${common} --tp 2 --batch 2 --metrics ${WORK}/straight.jsonl)
read_metrics(straight ${WORK}/straight.jsonl)
run_checked(stopped ok 120 ${launcher} -n 4 ${TRAIN_GPT} ${common} --tp 2 --batch 2 --stop-at 10
            --checkpoint-dir ${WORK}/ckpt --metrics ${WORK}/stopped.jsonl)
read_metrics(stopped ${WORK}/stopped.jsonl)
expect_steps(stopped straight 0 9 exact)
foreach(resume "1|--batch|4" "2|--pp|2|--batch|4|--microbatches|2" "4|--tp|2|--batch|2|exact")
  string(REPLACE "|" ";" args "${resume}")
  set(how relative)
  list(GET args -1 last)
  if(last STREQUAL "exact")
    set(how exact)
    list(POP_BACK args)
  endif()
  list(POP_FRONT args np)
  string(REGEX REPLACE "[^a-z0-9]+" "_" tag "np${np}_${args}")
  file(COPY ${WORK}/ckpt/ DESTINATION ${WORK}/${tag})
  run_checked(${tag} ok 120 ${launcher} -n ${np} ${TRAIN_GPT} ${common} ${args} --checkpoint-dir ${WORK}/${tag}
              --resume --metrics ${WORK}/${tag}.jsonl)
  expect_in(${tag} "resumed from ${WORK}/${tag}/step-00000010")
  read_metrics(${tag} ${WORK}/${tag}.jsonl)
  expect_steps(${tag} straight 10 19 ${how})
endforeach()
