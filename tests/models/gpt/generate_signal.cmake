# strata-generate stopped by SIGTERM mid-generation (cmake -P): two ranks decoding tensor parallel, every block
# streamed from the weights file, are sent SIGTERM while they decode, once through mpirun (a scheduler's cancel) and
# once to rank 1 alone (a node's OOM killer, a kill from outside the job). Each time every rank is gone within 20 s,
# the job exits non-zero naming the signal, and no generated line was printed: rank 0 prints only when every prompt is
# done, so nothing half-written reaches the output. strata-generate writes no file.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DGENERATE=<strata-generate>
# -DWORK=<scratch directory, emptied>.

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
string(REPLACE "|" ";" launch "${MPIEXEC}")
string(REPEAT "the strata runtime shards parameters. " 40 text)
file(WRITE "${WORK}/text.txt" "${text}")
# 8 layers of 512 (100 MB of f32 weights), a 1024-token context: decoding 1000 tokens streamed from the file takes
# seconds even on a fast machine (about 25 s on 2 cores).
run_checked(init ok 180 ${launch} -n 1 ${TRAIN_GPT} --steps 1 --no-progress --text ${WORK}/text.txt --layers 8
            --heads 8 --embd 512 --seq 64 --ctx 1024 --batch 1 --save ${WORK}/weights.safetensors)
set(job ${launch} -n 2 ${GENERATE} --weights ${WORK}/weights.safetensors --heads 8 --tp 2 --tokens 116,104
    --tokens 115 --max-new-tokens 1000 --resident-layers 0 --weights-from disk --prefetch 0)
list(JOIN job " " job_line)

# interrupted(<name> <target>): runs the job in the background, sends SIGTERM after 3 s to <target> (mpirun: the
# launcher; rank1: the second strata-generate process), and checks what is said above.
function(interrupted name target)
  # The ranks are the launcher's children named strata-generate (not other jobs' ranks, nor this shell).
  set(pick "kill -TERM $launcher")
  if(target STREQUAL "rank1")
    set(pick "kill -TERM $(echo $ranks | cut -d' ' -f2)")
  endif()
  execute_process(
    COMMAND sh -c "${job_line} > ${name}.log 2>&1 & launcher=$!; sleep 3
      if ! kill -0 $launcher 2>/dev/null; then echo 'ended before the signal'; exit 3; fi
      ranks=$(pgrep -x strata-generate -P $launcher | tr '\\n' ' ')
      [ $(echo $ranks | wc -w) -eq 2 ] || { echo \"not two ranks under the launcher: $ranks\"; kill -KILL $launcher; exit 5; }
      ${pick}
      t0=$(date +%s)
      wait $launcher; rc=$?
      alive() { for p in $ranks; do kill -0 $p 2>/dev/null && return 0; done; return 1; }
      for i in $(seq 100); do alive || break; sleep 0.2; done
      if alive; then echo \"ranks left running: $ranks\"; kill -KILL $ranks; exit 4; fi
      echo \"exit $rc after $(( $(date +%s) - t0 )) s\"; [ $rc -ne 0 ]"
    WORKING_DIRECTORY ${WORK} OUTPUT_VARIABLE said RESULT_VARIABLE rc TIMEOUT 90)
  file(READ ${WORK}/${name}.log log)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: ${said} (rc ${rc})\n${log}")
  endif()
  if(log MATCHES "(^|\n)[0-9]+: [0-9]")
    message(FATAL_ERROR "${name}: generated lines were printed:\n${log}")
  endif()
  if(NOT log MATCHES "strata-generate: rank [01]/2: stopped by SIGTERM; no generated line was printed")
    message(FATAL_ERROR "${name}: the job's output does not name the signal:\n${log}")
  endif()
  string(STRIP "${said}" said)
  message(STATUS "${name}: ${said}, every rank gone, nothing printed")
endfunction()

interrupted(term_to_mpirun mpirun)
interrupted(term_to_rank1 rank1)
