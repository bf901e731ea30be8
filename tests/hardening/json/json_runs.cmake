# Untrusted JSON through the tools (cmake -P): strata-plan --simulate with malformed cluster files. Each must end
# with exit code 1 and one line naming the file and the field (before: a number for "name" aborted with an uncaught
# library exception, SIGABRT; an overflowing count was read modulo 2^32; an unknown key was ignored).
# -DSTRATA_PLAN=<binary> -DSOURCE=<repository root> -DWORK=<scratch directory, emptied>.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
file(READ ${SOURCE}/tools/clusters/h100_ib400.json good)
set(model --layers 2 --hidden 64 --heads 2 --seq 16)

# cluster(<name> <from> <to> <message>): the shipped H100 file with <from> replaced by <to> is refused so.
function(cluster name from to says)
  string(FIND "${good}" "${from}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${name}: '${from}' is not in the shipped cluster file")
  endif()
  string(REPLACE "${from}" "${to}" text "${good}")
  file(WRITE ${WORK}/${name}.json "${text}")
  run_checked(${name} fail 20 ${STRATA_PLAN} --simulate --cluster ${WORK}/${name}.json ${model})
  if(NOT ${name}_out MATCHES "strata-plan: [^\n]*cluster file [^\n]*${name}.json: ")
    message(FATAL_ERROR "${name}: no one-line message naming the file:\n${${name}_out}")
  endif()
  expect_text(${name} "${says}")
  foreach(bad "terminate called" "json.exception" "Aborted")
    string(FIND "${${name}_out}" "${bad}" found)
    if(NOT found EQUAL -1)
      message(FATAL_ERROR "${name}: '${bad}' in:\n${${name}_out}")
    endif()
  endforeach()
endfunction()

run_checked(good ok 20 ${STRATA_PLAN} --simulate --cluster ${SOURCE}/tools/clusters/h100_ib400.json ${model})
cluster(name_number "\"name\": \"H100" "\"name\": 7, \"x\": \"" ".name: expected a string, got an integer 7")
cluster(count_overflow "\"devices_per_node\": 8" "\"devices_per_node\": 4294967304"
        ".devices_per_node: expected an integer in [1, 2^20], got 4294967304")
cluster(unknown_key "\"gemm_efficiency\": 0.36" "\"gemm_efficiency\": 0.36, \"gemm_eficiency\": 0.5"
        ".gemm_eficiency: unknown key (known here: name, notes, devices_per_node")
cluster(string_rate "\"bandwidth_gbs\": 360" "\"bandwidth_gbs\": \"fast\""
        ".intra_node.bandwidth_gbs: expected a number, got a string \"fast\"")
cluster(cut_short "\"inter_node\"" "" "not valid JSON: ")
cluster(nested "\"intra_node\": {" "\"intra_node\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{"
        "nested deeper than 64 levels")
