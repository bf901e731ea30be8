# Scripts fail like the programs do (cmake -P): every bad argument is a one-line message and a non-zero exit, never
# a Python traceback or a silent exit; the sweep's CSV survives a cut-off row.
#   -DMODE=arguments   scale.py --np 1,x / --np 0 / --steps 0 / --rows -1 / an --out that is a file; launch.sh with an
#                      empty hostfile (before: exit 1 without a word) and an option without its value.
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
