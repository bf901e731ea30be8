# Shared by the script tests (cmake -P) that launch Strata's tools and check how they end.

# run_checked(<name> <expect: ok|fail> <timeout_s> argv...): runs argv (in WORK when it is set), writes its command,
# exit and output to WORK/<name>.log, and fails the script when it does not end within timeout_s (a hang fails here,
# before ctest's TIMEOUT) or its exit disagrees with `expect`. Sets <name>_out (stdout, then stderr) and
# <name>_seconds in the caller.
function(run_checked name expect timeout)
  set(dir_args)
  if(WORK)
    set(dir_args WORKING_DIRECTORY "${WORK}")
  endif()
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${ARGN} ${dir_args} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc
                  TIMEOUT ${timeout})
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  set(text "${out}\n${err}")
  if(WORK)
    file(WRITE "${WORK}/${name}.log" "${ARGN}\nrc ${rc}\n${text}")
  endif()
  if(NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "${name}: did not end within ${timeout} s (${rc}): ${ARGN}\n${text}")
  endif()
  if(expect STREQUAL "ok" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: failed (${rc}): ${ARGN}\n${text}")
  elseif(expect STREQUAL "fail" AND rc EQUAL 0)
    message(FATAL_ERROR "${name}: exited 0, a failure was expected: ${ARGN}\n${text}")
  endif()
  message(STATUS "${name}: exit ${rc} after ${seconds} s")
  set(${name}_out "${text}" PARENT_SCOPE)
  set(${name}_seconds ${seconds} PARENT_SCOPE)
endfunction()

# expect_text(<name> texts...): each text is in <name>_out.
function(expect_text name)
  foreach(t IN LISTS ARGN)
    string(FIND "${${name}_out}" "${t}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name}: the output does not say '${t}':\n${${name}_out}")
    endif()
  endforeach()
endfunction()

# expect_no_steps_after(<name> <last>): no train_gpt step after <last> was printed in <name>_out (the failure
# stopped the run there).
macro(expect_no_steps_after name last)
  string(REGEX MATCHALL "(^|\n)step [0-9]+ loss" printed "${${name}_out}")
  foreach(line IN LISTS printed)
    string(REGEX MATCH "[0-9]+" n "${line}")
    if(n GREATER ${last})
      message(FATAL_ERROR "${name}: step ${n} ran after the failure:\n${${name}_out}")
    endif()
  endforeach()
endmacro()

# unpack_row(<row> <var>...): a table row "a|b|...|x,y,z" into the variables, in order; the last field is a list of
# flags with ',' for ' ' (it becomes a CMake list).
function(unpack_row row)
  string(REPLACE "|" ";" fields "${row}")
  set(i 0)
  foreach(var IN LISTS ARGN)
    list(GET fields ${i} value)
    math(EXPR i "${i} + 1")
    list(LENGTH ARGN n)
    if(i EQUAL n)
      string(REPLACE "," ";" value "${value}")
    endif()
    set(${var} "${value}" PARENT_SCOPE)
  endforeach()
endfunction()

# json_ids(<out> <file> <key>): the JSON array <key> of <file> (token ids) as "a,b,c".
function(json_ids out file key)
  file(READ ${file} json)
  string(JSON n LENGTH "${json}" ${key})
  math(EXPR last "${n} - 1")
  set(ids)
  foreach(i RANGE ${last})
    string(JSON t GET "${json}" ${key} ${i})
    list(APPEND ids ${t})
  endforeach()
  list(JOIN ids "," ids)
  set(${out} ${ids} PARENT_SCOPE)
endfunction()

# run_exit(<out> <exit code> <timeout> <command...>): runs the command, fails unless it exits with that code within
# <timeout> s, and returns its stdout and stderr together in <out>.
function(run_exit out rc_want timeout)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT ${timeout})
  if(NOT "${rc}" STREQUAL "${rc_want}")
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "'${cmd}' exited ${rc}, expected ${rc_want}:\n${text}\n${err}")
  endif()
  set(${out} "${text}${err}" PARENT_SCOPE)
endfunction()

# expect_match(<text> <regex> <what>): fails naming <what> unless <text> matches <regex>.
function(expect_match text regex what)
  if(NOT "${text}" MATCHES "${regex}")
    message(FATAL_ERROR "${what}: no match for '${regex}' in:\n${text}")
  endif()
endfunction()
