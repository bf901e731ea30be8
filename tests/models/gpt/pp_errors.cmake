# Pipeline settings that cannot run, and a stage that never sends (cmake -P): each must end every rank with a message
# naming the values (settings: before the first step) or naming the rank, the peer and the micro-batch waited for (the
# fault: within STRATA_TIMEOUT_S, here 5 s, well before run_checked's bound).
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(common --steps 3 --no-progress --layers 4)

# name | np | expected text | flags (',' for ' ')
set(bad
  "fewer_micro_batches|4|--microbatches 2 is fewer than the 4 pipeline stages|--pp,4,--microbatches,2,--batch,4"
  "too_few_layers|2|a model of 3 layers cannot fill 2 pipeline stages x 2 virtual = 4 stages|--pp,2,--pp-schedule,interleaved,--pp-virtual,2,--microbatches,2,--batch,4,--layers,3"
  "batch|2|a batch of 6 is not divisible by --microbatches 4|--pp,2,--microbatches,4,--batch,6"
  "grad_accum|2|--grad-accum 2 with --microbatches 2|--pp,2,--grad-accum,2"
  "world|4|--pp 3 x --tp 1 does not divide the world size 4|--pp,3"
  "virtual_without_interleaved|2|--pp-virtual 2 needs --pp-schedule interleaved|--pp,2,--pp-virtual,2"
  "schedule|2|--pp-schedule 'zigzag' is not a schedule|--pp,2,--pp-schedule,zigzag")
foreach(case IN LISTS bad)
  unpack_row("${case}" name np text flags)
  run_checked(${name} fail 60 ${launcher} -n ${np} ${TRAIN_GPT} ${common} ${flags})
  expect_text(${name} "${text}")
  expect_no_steps_after(${name} -1)
  # Every rank refuses (each checks before allocating): the message is there once per rank.
  string(REGEX MATCHALL "\\[rank [0-9]+/${np}\\][^\n]*${text}" said "${${name}_out}")
  list(LENGTH said ranks)
  if(ranks LESS ${np})
    message(FATAL_ERROR "${name}: ${ranks} of ${np} ranks said '${text}':\n${${name}_out}")
  endif()
  message(STATUS "${name} (np ${np}): every rank said '${text}'")
endforeach()

# pp rank 0 drops its sends: pp rank 1 waits for the first activation and names it; all ranks end.
set(ENV{STRATA_FAULT} "pp-no-send:0")
set(ENV{STRATA_TIMEOUT_S} "5")
run_checked(no_send fail 60 ${launcher} -n 2 ${TRAIN_GPT} ${common} --pp 2 --microbatches 2 --batch 4)
expect_text(no_send "timed out after 5 s"
            "pipeline: pp rank 1 of 2 (1f1b schedule) was transferring: recv act 0@s0 <- pp 0 (world rank 0, micro-batch 0)")
expect_no_steps_after(no_send -1)
message(STATUS "no_send: ended in ${no_send_seconds} s naming the rank, the peer and the micro-batch")
