# The hosts harness (scripts/hosts.sh) end to end (cmake -P): hosts_jobs.cmake inside two hosts, then harnesses
# interrupted by SIGTERM mid-command; after each, no namespace, interface or mount it made is left. Prints
# "hosts: skipped: ..." (ctest SKIP_REGULAR_EXPRESSION) where namespaces cannot be made.
# -DHOSTS=<scripts/hosts.sh> -DWORK=<scratch directory, emptied> and hosts_jobs.cmake's -D arguments (MPIEXEC,
# TRAIN_GPT, COMPARE, STRATA_CKPT, LAUNCH, AT_STEP).
include(${CMAKE_CURRENT_LIST_DIR}/../support/run_checks.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# What the machine holds that a harness could leave behind: network namespaces, interfaces, mounts.
function(machine_state out)
  execute_process(COMMAND ip netns list OUTPUT_VARIABLE ns)
  execute_process(COMMAND ip -o link show OUTPUT_VARIABLE links)
  string(REGEX REPLACE "[0-9]+: ([^:@]+)[^\n]*" "\\1" links "${links}")  # names only: counters change
  file(READ /proc/self/mountinfo mounts)
  string(REGEX MATCHALL "[^\n]*strata-hosts[^\n]*|[^\n]*${WORK}[^\n]*" mounts "${mounts}")
  set(${out} "netns:\n${ns}\nlinks:\n${links}\nmounts:\n${mounts}" PARENT_SCOPE)
endfunction()
function(expect_state_unchanged name before)
  machine_state(after)
  if(NOT after STREQUAL before)
    message(FATAL_ERROR "${name}: the harness left something behind.\nbefore:\n${before}\nafter:\n${after}")
  endif()
  message(STATUS "${name}: no namespace, interface or mount left behind")
endfunction()

execute_process(COMMAND ${HOSTS} --clean)  # what an earlier harness killed by SIGKILL left
machine_state(before)
set(jobs_args)
foreach(v MPIEXEC TRAIN_GPT COMPARE STRATA_CKPT LAUNCH AT_STEP)
  list(APPEND jobs_args "-D${v}=${${v}}")
endforeach()
execute_process(COMMAND ${HOSTS} --hosts 2 --work ${WORK}/harness --
                        ${CMAKE_COMMAND} ${jobs_args} -DWORK=${WORK}/runs -DDISK=${WORK}/harness/disk
                        -DHOST_DISKS=${WORK}/harness/hosts -P ${CMAKE_CURRENT_LIST_DIR}/hosts_jobs.cmake
                RESULT_VARIABLE rc TIMEOUT 1500)
if(rc EQUAL 77)
  message(STATUS "hosts: skipped: scripts/hosts.sh cannot make namespaces here (its line above says why)")
  return()
endif()
expect_state_unchanged(jobs "${before}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "hosts_jobs.cmake inside the harness failed (${rc}): see its output above")
endif()

# Interrupted while its command runs, by `timeout` (SIGTERM to the harness, then to its whole process group, so a
# second one lands during the cleanup) and by a SIGTERM to the harness alone: it still removes everything.
run_checked(interrupted fail 30 timeout -s TERM 3 ${HOSTS} --hosts 3 --work ${WORK}/interrupted -- sleep 60)
expect_state_unchanged(interrupted "${before}")
# (The shell lines are separated by newlines: a ';' would split the CMake argument.)
run_checked(terminated fail 60 sh -c "${HOSTS} --hosts 2 --work ${WORK}/terminated -- sh -c 'touch started && sleep 60' &
p=$!
while [ ! -e ${WORK}/started ]
do sleep 0.1
done
kill -TERM $p
wait $p")
expect_state_unchanged(terminated "${before}")
