# One job owns a directory it fills (cmake -P): a second job on it is refused naming the first (host, pid, start
# time), a dead job's lock is taken over with a warning, a lock of another host is refused with how to remove it.
#   -DMODE=two_jobs   train_gpt A (np 1, a long run) holds --checkpoint-dir ckpt; train_gpt B (np 2) on ckpt fails on
#                     both ranks before any step, naming A; A is killed (SIGTERM: no clean-up, its record stays); C
#                     (np 2) takes the lock over with a warning naming A and trains; a record of another host stops D.
#                     (Before: B ran, both exited 0, and each replaced and pruned the other's checkpoints.)
#   -DMODE=scale_out  a sweep's --out held by another process (the scripts' lock, scripts/strata_files.py): scale.py
#                     into it is refused naming the holder, and so is train_gpt --checkpoint-dir into it (one lock,
#                     shared by C++ and Python).
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DBIN=<directory of train_gpt> -DSCRIPTS=<scripts/>
# -DWORK=<scratch directory, emptied> [-DHOLDER_SCRIPTS=<scripts/ whose strata_files.py the scale_out holder uses>].
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
set(gpt ${BIN}/train_gpt --no-progress --tokens 4096)

# start_holder(<name> <ready file> <command...>): runs the command in the background (its pid in WORK/<name>.pid),
# then waits until WORK/<ready file> is not empty (the holder has started its work). Sets holder_pid in the caller:
# the pid WORK/<holder_dir>/.lock names, or "(none: no lock)" where nothing wrote one.
function(start_holder name ready)
  list(JOIN ARGN " " cmd)
  execute_process(COMMAND sh -c "${cmd} > ${name}.log 2>&1 & echo $! > ${name}.pid" WORKING_DIRECTORY ${WORK})
  foreach(i RANGE 150)
    if(EXISTS ${WORK}/${ready})
      file(READ ${WORK}/${ready} started)
      if(NOT started STREQUAL "")
        set(pid "(none: no lock)")
        if(EXISTS ${WORK}/${holder_dir}/.lock)
          file(READ ${WORK}/${holder_dir}/.lock record)
          if(record MATCHES "\"pid\": ?([0-9]+)")
            set(pid ${CMAKE_MATCH_1})
          endif()
        endif()
        set(holder_pid ${pid} PARENT_SCOPE)
        message(STATUS "${name}: running; the lock names pid ${pid}")
        return()
      endif()
    endif()
    execute_process(COMMAND sleep 0.2)
  endforeach()
  file(READ ${WORK}/${name}.log log)
  message(FATAL_ERROR "${name} did not start within 30 s:\n${log}")
endfunction()

# stop_holder(<name>): SIGTERM to the background command, and a wait for it to end.
function(stop_holder name)
  file(READ ${WORK}/${name}.pid pid)
  string(STRIP "${pid}" pid)
  execute_process(COMMAND sh -c "kill -TERM ${pid}; for i in $(seq 100); do kill -0 ${pid} 2>/dev/null || exit 0; \
sleep 0.2; done; kill -KILL ${pid}; exit 1" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} did not end within 20 s of SIGTERM")
  endif()
endfunction()

if(MODE STREQUAL "two_jobs")
  set(holder_dir ckpt)
  # (Under timeout: a failure below leaves no job behind for long.)
  start_holder(job_a a.jsonl timeout 90 ${launcher} -n 1 ${gpt} --steps 100000000 --checkpoint-dir ckpt
               --metrics a.jsonl)
  run_checked(job_b fail 30 ${launcher} -n 2 ${gpt} --steps 3 --checkpoint-dir ckpt)
  expect_text(job_b "checkpoint directory 'ckpt' is in use by another job: train_gpt (pid ${holder_pid} on host "
                    ", started 20" "wait for it to end, or use another directory")
  expect_no_steps_after(job_b -1)
  set(a_pid ${holder_pid})
  stop_holder(job_a)
  file(GLOB written "${WORK}/ckpt/step-*")
  if(written)
    message(FATAL_ERROR "a checkpoint appeared while only the refused job and the killed one ran: ${written}")
  endif()
  run_checked(job_c ok 60 ${launcher} -n 2 ${gpt} --steps 2 --checkpoint-dir ckpt)
  expect_text(job_c "took over the lock" ": train_gpt (pid ${a_pid} on host ")
  file(READ ${WORK}/ckpt/.lock record)
  if(NOT record STREQUAL "")
    message(FATAL_ERROR "job C ended but left its lock record: ${record}")
  endif()
  file(WRITE ${WORK}/ckpt/.lock "{\"host\":\"elsewhere.invalid\",\"pid\":4242,\"start_ticks\":1,\"started\":\"2026-01-01 00:00:00 UTC\",\"program\":\"train_gpt\"}\n")
  run_checked(job_d fail 30 ${launcher} -n 2 ${gpt} --steps 2 --checkpoint-dir ckpt --resume)
  expect_text(job_d "is locked by train_gpt (pid 4242 on host elsewhere.invalid, started 2026-01-01 00:00:00 UTC), on "
                    "another host" "If it does not, remove ")
  expect_no_steps_after(job_d -1)
elseif(MODE STREQUAL "scale_out")
  set(holder_dir sweep)
  file(MAKE_DIRECTORY ${WORK}/sweep)
  # (A file: a ';' in a CMake argument would split it.)
  if(NOT HOLDER_SCRIPTS)  # where the holder's lock comes from (the scripts under test, unless told otherwise)
    set(HOLDER_SCRIPTS ${SCRIPTS})
  endif()
  file(WRITE ${WORK}/holder.py "import sys, time\nsys.path.insert(0, '${HOLDER_SCRIPTS}')\n"
                               "from strata_files import DirLock\nlock = DirLock('sweep', '--out', 'holder')\n"
                               "open('held', 'w').write('held')\ntime.sleep(60)\n")
  start_holder(holder held python3 holder.py)
  run_checked(sweep fail 30 python3 ${SCRIPTS}/scale.py --np 1 --layouts dp --models tiny --scaling weak --steps 1
              --build ${BIN}/.. --out sweep)
  expect_text(sweep "scale.py: --out 'sweep' is in use by another job: holder (pid ${holder_pid} on host ")
  if(sweep_out MATCHES "Traceback")
    message(FATAL_ERROR "sweep: a traceback:\n${sweep_out}")
  endif()
  run_checked(gpt_in_sweep fail 30 ${launcher} -n 1 ${gpt} --steps 1 --checkpoint-dir sweep)
  expect_text(gpt_in_sweep "checkpoint directory 'sweep' is in use by another job: holder (pid ${holder_pid}")
  stop_holder(holder)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
