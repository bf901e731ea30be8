# Recomputation and activation offload through train_gpt (cmake -P), at np 2 on a 4-block model: each --recompute
# kind, every 2nd block, a list of one kind per block and --recompute auto under a budget give losses, gradient norms
# and final weights equal to the plain run's to the bit (compare_runs at tolerance 0); the banner names the policy and
# the FLOPs it runs again; bad values stop every rank before the first step with the problem named.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCOMPARE=<compare_runs>
# -DWORK=<scratch directory, emptied>.
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

set(model --layers 4 --heads 2 --embd 32 --vocab 64 --ctx 32 --seq 32 --batch 2 --steps 6 --tokens 8192 --lr 1e-2
          --no-progress)
run_checked(plain ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${model} --metrics ${WORK}/plain.jsonl
            --save ${WORK}/plain.safetensors)

# name|flags (comma-separated)|text the banner must show
foreach(run "mlp|--recompute,mlp|recompute mlp (+0.0% FLOPs"
            "attention|--recompute,attention,--zero-stage,1|recompute attention (+"
            "full|--recompute|recompute full (+"
            "every2|--recompute,full,--recompute-every,2|recompute full on every 2nd block (+"
            "offload|--recompute,offload|recompute offload (+0.0% FLOPs"
            "list|--recompute,offload,mlp,attention,full|recompute 1 x offload, 1 x full, 1 x attention, 1 x mlp")
  string(REPLACE "|" ";" run "${run}")
  list(GET run 0 name)
  list(GET run 1 flags)
  list(GET run 2 text)
  string(REPLACE "," ";" flags "${flags}")
  # A kind per block is one comma-separated value: put the commas back.
  if(name STREQUAL "list")
    set(flags --recompute "offload,mlp,attention,full")
  endif()
  run_checked(${name} ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${model} ${flags} --metrics ${WORK}/${name}.jsonl
              --save ${WORK}/${name}.safetensors)
  expect_text(${name} "${text}")
  run_checked(${name}_equal ok 60 ${COMPARE} 0 0 0 ${WORK}/plain.jsonl ${WORK}/${name}.jsonl
              ${WORK}/plain.safetensors ${WORK}/${name}.safetensors)
endforeach()

# Checkpoints: a run stopped at step 3 under one policy resumes under another and ends where the plain run does.
run_checked(ckpt_first ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${model} --recompute offload --checkpoint-dir
            ${WORK}/ckpt --stop-at 3)
run_checked(ckpt_resume ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${model} --recompute attention --checkpoint-dir
            ${WORK}/ckpt --resume --save ${WORK}/resumed.safetensors)
run_checked(ckpt_equal ok 60 ${COMPARE} 0 0 0 ${WORK}/plain.jsonl ${WORK}/plain.jsonl ${WORK}/plain.safetensors
            ${WORK}/resumed.safetensors)

# auto under a budget the plain run does not fit (its step needs 1660128 bytes a rank here, full recomputation
# 1286880, the runtime about 100 KiB more before the trainer): some blocks are recomputed or offloaded.
run_checked(auto ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${model} --recompute auto --device-memory 1500KiB
            --metrics ${WORK}/auto.jsonl --save ${WORK}/auto.safetensors)
expect_text(auto "--recompute auto chose --recompute ")
run_checked(auto_equal ok 60 ${COMPARE} 0 0 0 ${WORK}/plain.jsonl ${WORK}/auto.jsonl ${WORK}/plain.safetensors
            ${WORK}/auto.safetensors)

run_checked(auto_without_budget fail 60 ${launcher} -n 2 ${TRAIN_GPT} ${model} --recompute auto)
expect_text(auto_without_budget "--recompute auto chooses from the device budget: give --device-memory")
run_checked(bad_kind fail 60 ${launcher} -n 2 ${TRAIN_GPT} ${model} --recompute selective)
expect_text(bad_kind "--recompute selective: a block's recomputation is none, mlp")
run_checked(short_list fail 60 ${launcher} -n 2 ${TRAIN_GPT} ${model} --recompute full,none)
expect_text(short_list "--recompute lists 2 blocks; the model has 4")
run_checked(tiny_budget fail 60 ${launcher} -n 2 ${TRAIN_GPT} ${model} --recompute auto --device-memory 64KiB)
expect_text(tiny_budget "--recompute auto: no recomputation or activation offload of the blocks fits")
