# Checkpoint runs of train_gpt under mpiexec (cmake -P, so no other interpreter is needed):
#   -DMODE=other_layouts  a run stopped at step 10 resumes at np 1, 3 and 4 (the same global batch of 12 rows) and at
#                         np 2 with another ZeRO stage; steps 10-19 equal the uninterrupted np 2 run's within 1e-5.
#   -DMODE=kill9          rank 1 dies by SIGKILL half-way through its second checkpoint file (STRATA_FAULT): the job
#                         fails within its time, `latest` still names step 5, and --resume from there equals the
#                         uninterrupted run bit for bit.
#   -DMODE=full_disk      rank 0's second checkpoint file hits ENOSPC: every rank fails with its message (rank 0
#                         naming its file, rank 1 saying step 5 is intact), and step 5 resumes bit for bit.
#   -DMODE=damaged        a flipped byte, a truncated or a missing rank file, or an index of version 99: --resume
#                         fails on every rank with a clear message before any step is printed.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>.

# The model is train_gpt's default (the spec's tiny GPT-2) on its synthetic tokens; 12 rows of 8 tokens a step.
set(common --steps 20 --no-progress --prefetch 1)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# run_gpt(<name> <np> <expect: ok|fail> args...): runs train_gpt; sets <name>_out (stdout and stderr) in the caller.
macro(run_gpt name np expect)
  run_checked(${name} ${expect} 120 ${launcher} -n ${np} ${TRAIN_GPT} ${common} ${ARGN})
endmacro()

# run_gpt_saying(<name> <np> <name of a list of texts> <directory to empty first, or ""> args...): a run that must
# fail and print every text of the list. When ranks fail together through all_agree, the rank with the cause (kIo: the
# file, the reason) and the others (kRemote) both abort the job; run_main gives the cause two seconds to land first.
function(run_gpt_saying name np texts_var reset)
  if(reset)
    file(REMOVE_RECURSE "${reset}")
  endif()
  run_gpt(${name} ${np} fail ${ARGN})
  set(missing)
  foreach(text IN LISTS ${texts_var})
    string(FIND "${${name}_out}" "${text}" at)
    if(at EQUAL -1)
      list(APPEND missing "${text}")
    endif()
  endforeach()
  if(missing)
    message(FATAL_ERROR "${name}: the output does not say '${missing}':\n${${name}_out}")
  endif()
  set(${name}_out "${${name}_out}" PARENT_SCOPE)
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

macro(expect_no_steps name)
  if("${${name}_out}" MATCHES "(^|\n)(step [0-9]+ loss|train_gpt: GPT)")
    message(FATAL_ERROR "${name}: the trainer started or a step ran before the error:\n${${name}_out}")
  endif()
endmacro()

macro(expect_latest dir step_name)
  file(READ "${dir}/latest" latest)
  string(STRIP "${latest}" latest)
  if(NOT latest STREQUAL "${step_name}")
    message(FATAL_ERROR "${dir}/latest names '${latest}', expected ${step_name}")
  endif()
endmacro()

if(MODE STREQUAL "other_layouts")
  run_gpt(straight 2 ok --batch 6 --metrics ${WORK}/straight.jsonl)
  read_metrics(straight ${WORK}/straight.jsonl)
  run_gpt(stopped 2 ok --batch 6 --stop-at 10 --checkpoint-dir ${WORK}/ckpt --metrics ${WORK}/stopped.jsonl)
  expect_latest(${WORK}/ckpt step-00000010)
  read_metrics(stopped ${WORK}/stopped.jsonl)
  expect_steps(stopped straight 0 9 exact)
  # np, rows per rank (12 global rows), extra flags
  foreach(resume "1;12" "3;4" "4;3" "2;6;--zero-stage;1" "2;6;--zero-stage;0")
    list(POP_FRONT resume np batch)
    string(REPLACE ";" "_" tag "np${np}_${resume}")
    string(REPLACE "-" "" tag "${tag}")
    file(COPY ${WORK}/ckpt/ DESTINATION ${WORK}/ckpt_${tag})  # each resume starts from step 10
    run_gpt(resume_${tag} ${np} ok --batch ${batch} ${resume} --checkpoint-dir ${WORK}/ckpt_${tag} --resume
            --metrics ${WORK}/resume_${tag}.jsonl)
    expect_in(resume_${tag} "resumed from ${WORK}/ckpt_${tag}/step-00000010")
    read_metrics(resume_${tag} ${WORK}/resume_${tag}.jsonl)
    expect_steps(resume_${tag} straight 10 19 relative)
    expect_latest(${WORK}/ckpt_${tag} step-00000020)
  endforeach()
  # Another global batch is said (6 rows a step where the checkpoint trained 12); --global-batch keeps it on 1 rank.
  file(COPY ${WORK}/ckpt/ DESTINATION ${WORK}/ckpt_half)
  run_gpt(resume_half 1 ok --batch 6 --checkpoint-dir ${WORK}/ckpt_half --resume)
  expect_in(resume_half "WARNING: --resume: the checkpoint trained 12 rows a step, this run trains 6")
  file(COPY ${WORK}/ckpt/ DESTINATION ${WORK}/ckpt_global)
  run_gpt(resume_global 1 ok --batch 6 --global-batch 12 --checkpoint-dir ${WORK}/ckpt_global --resume
          --metrics ${WORK}/resume_global.jsonl)
  expect_in(resume_global "1 data-parallel ranks x 6 rows x 8 tokens x 2 micro-batches")
  read_metrics(resume_global ${WORK}/resume_global.jsonl)
  expect_steps(resume_global straight 10 19 relative)
elseif(MODE STREQUAL "kill9")
  run_gpt(straight 2 ok --batch 6 --metrics ${WORK}/straight.jsonl)
  read_metrics(straight ${WORK}/straight.jsonl)
  set(ENV{STRATA_FAULT} "checkpoint-kill:1:2")
  set(ENV{STRATA_TIMEOUT_S} "20")
  run_gpt(killed 2 fail --batch 6 --checkpoint-every 5 --checkpoint-dir ${WORK}/ckpt)
  unset(ENV{STRATA_FAULT})
  expect_no_steps_after(killed 8)  # rank 1 died in the save after step 9
  expect_latest(${WORK}/ckpt step-00000005)
  if(NOT IS_DIRECTORY ${WORK}/ckpt/step-00000010.tmp OR IS_DIRECTORY ${WORK}/ckpt/step-00000010)
    message(FATAL_ERROR "expected the killed save's step-00000010.tmp and no step-00000010")
  endif()
  run_gpt(resumed 2 ok --batch 6 --checkpoint-every 5 --checkpoint-dir ${WORK}/ckpt --resume
          --metrics ${WORK}/resumed.jsonl)
  expect_in(resumed "resumed from ${WORK}/ckpt/step-00000005")
  read_metrics(resumed ${WORK}/resumed.jsonl)
  expect_steps(resumed straight 5 19 exact)
  expect_latest(${WORK}/ckpt step-00000020)
elseif(MODE STREQUAL "full_disk")
  run_gpt(straight 2 ok --batch 6 --metrics ${WORK}/straight.jsonl)
  read_metrics(straight ${WORK}/straight.jsonl)
  set(ENV{STRATA_FAULT} "checkpoint-enospc:0:2")
  # Rank 0 names its file; rank 1 names rank 0 and says step 5 is intact.
  set(texts "[rank 0/2] runtime/checkpoint/chunk_file.cc"
            "cannot write ${WORK}/ckpt/step-00000010.tmp/rank-00000.bin: No space left on device"
            "[rank 1/2] collectives/rank_values.cc"
            "checkpoint of step 10 in ${WORK}/ckpt: rank(s) 0 of 'world' failed"
            "the last committed checkpoint, ${WORK}/ckpt/step-00000005, is intact")
  run_gpt_saying(full 2 texts ${WORK}/ckpt --batch 6 --checkpoint-every 5 --checkpoint-dir ${WORK}/ckpt)
  unset(ENV{STRATA_FAULT})
  expect_no_steps_after(full 8)  # the save after step 9 failed
  expect_latest(${WORK}/ckpt step-00000005)
  run_gpt(resumed 2 ok --batch 6 --checkpoint-every 5 --checkpoint-dir ${WORK}/ckpt --resume
          --metrics ${WORK}/resumed.jsonl)
  expect_in(resumed "resumed from ${WORK}/ckpt/step-00000005")
  read_metrics(resumed ${WORK}/resumed.jsonl)
  expect_steps(resumed straight 5 19 exact)
elseif(MODE STREQUAL "damaged")
  find_program(TRUNCATE truncate REQUIRED)
  run_gpt(saved 2 ok --batch 6 --stop-at 10 --checkpoint-dir ${WORK}/ckpt)
  set(step ${WORK}/ckpt/step-00000010)
  file(SIZE ${step}/rank-00001.bin bytes)
  math(EXPR half "${bytes} / 2")
  foreach(damage corrupt truncated missing version)
    set(dir ${WORK}/${damage})
    file(COPY ${WORK}/ckpt/ DESTINATION ${dir})
    set(file ${dir}/step-00000010/rank-00001.bin)
    if(damage STREQUAL "corrupt")
      flip_middle_byte(${file} rc)  # in the middle of rank 1's file
      set(why "${file} is corrupt: tensor '")
    elseif(damage STREQUAL "truncated")
      execute_process(COMMAND ${TRUNCATE} -s ${half} ${file} RESULT_VARIABLE rc)
      set(why "checkpoint file ${file} has ${half} bytes, the index says ${bytes}: it is truncated")
    elseif(damage STREQUAL "missing")
      file(REMOVE ${file})
      set(rc 0)
      set(why "cannot open checkpoint file ${file}: No such file or directory")
    else()
      file(READ ${dir}/step-00000010/index.json index)
      string(REGEX REPLACE "\"version\": 1," "\"version\": 99," index "${index}")
      file(WRITE ${dir}/step-00000010/index.json "${index}")
      set(rc 0)
      set(why "format version 99 was written by a newer Strata")
    endif()
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "could not damage ${file} (${damage})")
    endif()
    if(damage STREQUAL "version")
      # Every rank reads the index and fails alike (one rank's abort may cut the other's copy of the message short).
      set(texts "${dir}/step-00000010/index.json" "${why}")
    else()
      # Rank 1 read the bad bytes (or found no file) and says what is wrong with which file; rank 0 says that rank 1
      # failed.
      set(site runtime/checkpoint/chunk_file.cc)
      if(damage STREQUAL "missing")
        set(site runtime/checkpoint/checkpoint_reader.cc)
      endif()
      set(texts "[rank 1/2] ${site}" "${why}"
                "[rank 0/2] collectives/rank_values.cc" "loading ${dir}/step-00000010: rank(s) 1 of 'world' failed")
    endif()
    run_gpt_saying(${damage} 2 texts "" --batch 6 --checkpoint-dir ${dir} --resume)
    expect_no_steps(${damage})
  endforeach()
else()
  message(FATAL_ERROR "MODE must be other_layouts, kill9, full_disk or damaged")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "${MODE}: passed")
