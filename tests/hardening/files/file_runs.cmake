# Files through the tools, under mpiexec (cmake -P):
#   -DMODE=input_fifo          --data, --init and --text naming a FIFO (np 2): every rank stops at once with a message
#                              naming the flag and "FIFO" (before, each rank blocked in open() for ever).
#   -DMODE=reader_fifos        strata-plan --cluster, scripts/launch.sh --hostfile and scripts/scale.py --hostfile
#                              naming a FIFO: each stops at once naming the flag and "FIFO" (before, each blocked in
#                              open() or read() for ever), and so does each naming a directory.
#   -DMODE=save_dir_missing    --save, --metrics, --trace, --make-data in a directory that does not exist, and
#   -DMODE=metrics_dir_missing --checkpoint-dir under a regular file (np 2): a failure naming the flag and the
#   -DMODE=trace_dir_missing   directory before the first step ("step 0" never printed).
#   -DMODE=make_data_dir_missing
#   -DMODE=checkpoint_dir_under_file
#   -DMODE=metrics_full_disk   --metrics /dev/full (writes fail with ENOSPC): non-zero exit naming the file and
#                              "No space left on device" (before: the records were dropped and the run exited 0).
#   -DMODE=trace_full_disk     the trace to /dev/full (passes the up-front check, fails on write) through train_gpt
#                              --trace, custom_trainer and collectives_bench under STRATA_TRACE, and --json /
#                              --ledger-json /dev/full, and a program that leaves the trace to the Runtime's
#                              destructor (-DPROBE): non-zero exit naming the file and the system error.
#   -DMODE=concurrent_saves    two train_gpt jobs (np 1, different seeds) saving to one path at the same time, three
#                              rounds: both succeed, the file is byte for byte one job's own, and no temporary is left.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DBIN=<directory of train_gpt, custom_trainer, collectives_bench>
# -DWORK=<scratch directory, emptied>.

string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(gpt ${BIN}/train_gpt --steps 3 --no-progress)

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

# run(<name> <expect: ok|fail> argv...): bounded at 25 s.
macro(run name expect)
  run_checked(${name} ${expect} 25 ${ARGN})
endmacro()

function(expect_no_step name)
  if("${${name}_out}" MATCHES "(^|\n)step 0 ")
    message(FATAL_ERROR "${name}: a step ran before the failure (the check must come first):\n${${name}_out}")
  endif()
endfunction()

if(MODE STREQUAL "input_fifo")
  execute_process(COMMAND mkfifo "${WORK}/fifo" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mkfifo failed (${rc})")
  endif()
  foreach(flag data init text)
    run(fifo_${flag} fail ${launcher} -n 2 ${gpt} --${flag} fifo)
    expect_text(fifo_${flag} "--${flag} 'fifo'" "FIFO")
  endforeach()
elseif(MODE STREQUAL "reader_fifos")
  execute_process(COMMAND mkfifo "${WORK}/fifo" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mkfifo failed (${rc})")
  endif()
  file(MAKE_DIRECTORY "${WORK}/adir")
  set(scripts ${CMAKE_CURRENT_LIST_DIR}/../../../scripts)
  foreach(input fifo adir)
    if(input STREQUAL "fifo")
      set(type "FIFO")
    else()
      set(type "directory")
    endif()
    run(plan_${input} fail ${BIN}/strata-plan --simulate --cluster ${input} --layers 2 --hidden 64 --heads 2 --seq 16)
    expect_text(plan_${input} "strata-plan: " "cluster file '${input}' is not a regular file but a ${type}")
    run(launch_${input} fail ${scripts}/launch.sh --hostfile ${input} --dry-run -- true)
    expect_text(launch_${input} "launch.sh: --hostfile '${input}' is not a regular file")
    run(scale_${input} fail python3 ${scripts}/scale.py --hostfile ${input} --ranks-per-node 1 --out sweep)
    expect_text(scale_${input} "scale.py: --hostfile '${input}' is not a regular file but a ${type}")
  endforeach()
elseif(MODE STREQUAL "save_dir_missing")
  run(save fail ${launcher} -n 2 ${gpt} --save missing/w.safetensors)
  expect_text(save "--save 'missing/w.safetensors'" "the directory 'missing' does not exist")
  expect_no_step(save)
elseif(MODE STREQUAL "metrics_dir_missing")
  run(metrics fail ${launcher} -n 2 ${gpt} --metrics missing/m.jsonl)
  expect_text(metrics "--metrics 'missing/m.jsonl'" "the directory 'missing' does not exist")
  expect_no_step(metrics)
elseif(MODE STREQUAL "trace_dir_missing")
  run(trace fail ${launcher} -n 2 ${gpt} --trace missing/t.json)
  expect_text(trace "--trace" "'missing/t.json'" "the directory 'missing' does not exist")
  expect_no_step(trace)
elseif(MODE STREQUAL "make_data_dir_missing")
  run(make_data fail ${launcher} -n 2 ${BIN}/train_gpt --make-data missing/tokens.bin)
  expect_text(make_data "--make-data 'missing/tokens.bin'" "the directory 'missing' does not exist")
elseif(MODE STREQUAL "checkpoint_dir_under_file")
  file(WRITE "${WORK}/afile" "not a directory\n")
  run(ckpt fail ${launcher} -n 2 ${gpt} --checkpoint-dir afile/ckpt)
  expect_text(ckpt "--checkpoint-dir 'afile/ckpt'" "Not a directory")
  expect_no_step(ckpt)
elseif(MODE STREQUAL "metrics_full_disk")
  run(metrics fail ${launcher} -n 2 ${gpt} --metrics /dev/full)
  expect_text(metrics "--metrics '/dev/full'" "No space left on device")
elseif(MODE STREQUAL "trace_full_disk")
  run(gpt_trace fail ${launcher} -n 2 ${gpt} --trace /dev/full)
  expect_text(gpt_trace "'/dev/full'" "No space left on device")
  expect_text(gpt_trace "step 2 ")  # it passed the up-front check (a writable device) and failed on the write
  run(custom_trace fail ${CMAKE_COMMAND} -E env STRATA_TRACE=/dev/full ${launcher} -n 2 ${BIN}/custom_trainer
      --steps 2)
  expect_text(custom_trace "'/dev/full'" "No space left on device")
  run(bench_trace fail ${CMAKE_COMMAND} -E env STRATA_TRACE=/dev/full ${launcher} -n 2 ${BIN}/collectives_bench
      -b 8 -e 64 -n 2 -w 1)
  expect_text(bench_trace "'/dev/full'" "No space left on device")
  run(bench_json fail ${launcher} -n 2 ${BIN}/collectives_bench -b 8 -e 64 -n 2 -w 1 --json /dev/full)
  expect_text(bench_json "--json '/dev/full'" "No space left on device")
  run(ledger_json fail ${launcher} -n 2 ${BIN}/custom_trainer --steps 2 --ledger-json /dev/full)
  expect_text(ledger_json "--ledger-json '/dev/full'" "No space left on device")
  if(PROBE)  # a program that leaves the trace to the Runtime's destructor: logged there, and still a failure
    run(probe_trace fail ${CMAKE_COMMAND} -E env STRATA_TRACE=/dev/full ${launcher} -n 2 ${PROBE})
    expect_text(probe_trace "at shutdown" "'/dev/full'" "No space left on device")
  endif()
elseif(MODE STREQUAL "concurrent_saves")
  # A model of 10M parameters (a 42 MB file), so the two saves overlap in time.
  set(model --layers 2 --embd 512 --heads 4 --vocab 8192 --ctx 64 --seq 8 --batch 1 --steps 1 --no-progress)
  foreach(seed 1 2)
    run(alone_${seed} ok ${launcher} -n 1 ${BIN}/train_gpt ${model} --seed ${seed} --save alone_${seed}.safetensors)
    file(SHA256 "${WORK}/alone_${seed}.safetensors" sum_${seed})
  endforeach()
  if(sum_1 STREQUAL sum_2)
    message(FATAL_ERROR "the two seeds gave the same weights: the test cannot tell the jobs apart")
  endif()
  foreach(round 1 2 3)
    set(job "${launcher};-n;1;${BIN}/train_gpt;${model}")
    list(JOIN job " " job)
    # Both jobs start together; each writes its exit status.
    execute_process(COMMAND sh -c "(${job} --seed 1 --save shared.safetensors >job1.log 2>&1; echo $? >job1.rc) & \
(${job} --seed 2 --save shared.safetensors >job2.log 2>&1; echo $? >job2.rc) & wait"
                    WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc TIMEOUT 60)
    foreach(j 1 2)
      file(READ "${WORK}/job${j}.rc" jrc)
      string(STRIP "${jrc}" jrc)
      if(NOT jrc EQUAL 0)
        file(READ "${WORK}/job${j}.log" log)
        message(FATAL_ERROR "round ${round}: job ${j} saving concurrently failed (${jrc}):\n${log}")
      endif()
    endforeach()
    file(SHA256 "${WORK}/shared.safetensors" sum)
    if(NOT sum STREQUAL sum_1 AND NOT sum STREQUAL sum_2)
      message(FATAL_ERROR "round ${round}: shared.safetensors is neither job's file: the two saves were mixed")
    endif()
    file(GLOB left "${WORK}/shared.safetensors.tmp*")
    if(left)
      message(FATAL_ERROR "round ${round}: temporary files left: ${left}")
    endif()
    message(STATUS "round ${round}: both jobs saved; the file is one job's own, whole")
    file(REMOVE "${WORK}/shared.safetensors")
  endforeach()
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
