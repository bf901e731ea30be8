# Scripts fail like the programs do (cmake -P): every bad argument is a one-line message and a non-zero exit, never
# a Python traceback or a silent exit; the sweep's CSV survives a cut-off row.
#   -DMODE=arguments   scale.py --np 1,x / --np 0 / --steps 0 / --rows -1 / an --out that is a file; launch.sh with an
#                      empty hostfile (before: exit 1 without a word) and an option without its value; a host listed
#                      twice or slots= below --ranks-per-node (before: Open MPI's refusal); a daemon's death named
#                      only as "Peer host:" restarts (before: not); hosts.sh --work naming a file (before: mkdir's).
#   -DMODE=csv_cut     a sweep's CSV whose last row was cut off (a sweep stopped mid-write): the resumed sweep drops it
#                      with a warning and runs it again, and the next row is not glued onto it (before: exit 0 with
#                      the two rows on one line).
# -DSCRIPTS=<scripts/> -DBUILD=<build directory> -DWORK=<scratch directory, emptied>.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
set(scale python3 ${SCRIPTS}/scale.py)

# one_line(<name> <text>): <name> failed saying <text>, and no traceback.
function(one_line name text)
  expect_text(${name} "${text}")
  if(${name}_out MATCHES "Traceback")
    message(FATAL_ERROR "${name}: a Python traceback:\n${${name}_out}")
  endif()
endfunction()

if(MODE STREQUAL "arguments")
  run_checked(np_word fail 20 ${scale} --np 1,x --out sweep)
  one_line(np_word "scale.py: error: argument --np: 'x' is not a whole number")
  run_checked(np_zero fail 20 ${scale} --np 0 --out sweep)
  one_line(np_zero "scale.py: error: argument --np: 0 must be at least 1")
  run_checked(steps_zero fail 20 ${scale} --steps 0 --out sweep)
  one_line(steps_zero "scale.py: error: argument --steps: 0 must be at least 1")
  run_checked(rows_negative fail 20 ${scale} --rows -1 --out sweep)
  one_line(rows_negative "scale.py: error: argument --rows: -1 must be at least 1")
  file(WRITE ${WORK}/a_file "not a directory\n")
  run_checked(out_file fail 20 ${scale} --np 1 --out a_file)
  one_line(out_file "scale.py: error: --out 'a_file' exists and is not a directory")
  file(WRITE ${WORK}/empty_hosts "# no host here\n\n")
  run_checked(empty_hostfile fail 20 ${SCRIPTS}/launch.sh --hostfile empty_hosts --dry-run -- true)
  one_line(empty_hostfile "launch.sh: --hostfile 'empty_hosts' lists no host")
  run_checked(no_value fail 20 ${SCRIPTS}/launch.sh --ranks-per-node --dry-run -- true)
  one_line(no_value "launch.sh: --ranks-per-node needs a value")
  run_checked(scale_empty_hostfile fail 20 ${scale} --hostfile empty_hosts --ranks-per-node 1 --out sweep)
  one_line(scale_empty_hostfile "scale.py: error: --hostfile: empty_hosts lists no host")
  # A hostfile Open MPI would refuse in its own words (or place unevenly) is refused first, naming the line.
  file(WRITE ${WORK}/twice_hosts "hostA\nhostB\nhostA slots=2\n")
  run_checked(host_twice fail 20 ${SCRIPTS}/launch.sh --hostfile twice_hosts --ranks-per-node 2 --dry-run -- true)
  one_line(host_twice "launch.sh: --hostfile 'twice_hosts' lists host 'hostA' twice (line 3)")
  file(WRITE ${WORK}/slot_hosts "hostA slots=1\nhostB\n")
  run_checked(few_slots fail 20 ${SCRIPTS}/launch.sh --hostfile slot_hosts --ranks-per-node 2 --dry-run -- true)
  one_line(few_slots "launch.sh: --hostfile 'slot_hosts' line 1 gives host 'hostA' slots=1, fewer than --ranks-per-node 2")
  # A host's daemon dies: Open MPI names the host only in the TCP transport's "Peer host:" lines, and launch.sh
  # --max-restarts restarts on the others with --resume (an mpirun stand-in first prints that, then succeeds).
  file(WRITE ${WORK}/pair_hosts "hostA\nhostB\n")
  file(MAKE_DIRECTORY ${WORK}/fake)
  file(WRITE ${WORK}/fake/mpirun [=[#!/bin/sh
hosts=""
while [ $# -gt 0 ]; do
  [ "$1" = --hostfile ] && hosts=$(tr '\n' ' ' <"$2")
  shift
done
if [ ! -e attempted ]; then
  : >attempted
  printf 'WARNING: Open MPI failed to TCP connect to a peer MPI process.\n\n  Local host: hostA\n  Peer host: hostB\n' >&2
  exit 1
fi
echo "second attempt on: $hosts"
]=])
  file(CHMOD ${WORK}/fake/mpirun PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
  run_checked(peer_lost ok 60 env PATH=${WORK}/fake:$ENV{PATH} ${SCRIPTS}/launch.sh --hostfile pair_hosts
              --max-restarts 1 --bind none -- train_gpt --steps 2)
  expect_text(peer_lost "its connection to hostB was lost (Peer host: hostB)" "second attempt on: hostA "
              "train_gpt --steps 2 --resume")
  # hosts.sh --work naming a file: its own message, not mkdir's under set -e.
  file(WRITE ${WORK}/work_file "a file\n")
  run_checked(work_is_file fail 20 ${SCRIPTS}/hosts.sh --work work_file -- true)
  if(NOT work_is_file_out MATCHES "skipped")
    one_line(work_is_file "hosts.sh: --work 'work_file' is not a directory")
  endif()
elseif(MODE STREQUAL "csv_cut")
  set(grid --layouts dp --models tiny --scaling weak --rows 1 --steps 2 --build ${BUILD} --out sweep)
  run_checked(first ok 200 ${scale} --np 1 ${grid})
  file(READ ${WORK}/sweep/scaling.csv csv)
  string(LENGTH "${csv}" n)
  math(EXPR cut "${n} - 4")
  string(SUBSTRING "${csv}" 0 ${cut} csv)  # the row's last characters and its newline are gone
  file(WRITE ${WORK}/sweep/scaling.csv "${csv}")
  run_checked(resumed ok 300 ${scale} --np 1,2 ${grid})
  expect_text(resumed "scale.py: warning: " "its last line was cut off" "scale.py: 2 rows in")
  file(STRINGS ${WORK}/sweep/scaling.csv lines)
  list(LENGTH lines count)
  if(NOT count EQUAL 3)
    message(FATAL_ERROR "scaling.csv has ${count} lines, not a header and 2 rows:\n${lines}")
  endif()
  list(GET lines 0 header)
  string(REGEX MATCHALL "," commas "${header}")
  list(LENGTH commas want)
  foreach(line IN LISTS lines)
    string(REGEX MATCHALL "," commas "${line}")
    list(LENGTH commas got)
    if(NOT got EQUAL want)
      message(FATAL_ERROR "a row of scaling.csv has ${got} separators, the header ${want} (rows glued or cut):\n"
                          "${line}")
    endif()
  endforeach()
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
