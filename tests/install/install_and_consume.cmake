# cmake -P: installs the build into a fresh prefix, configures and builds tests/install/consumer against it with
# find_package(strata CONFIG), runs it on 2 ranks, and checks that its installed flag validator refuses --steps 0.
# -DBUILD_DIR -DSOURCE_DIR -DWORK_DIR -DMPIEXEC ('|'-separated words) -DCXX -DCUDA_ROOT (may be empty)
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
endfunction()
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
set(extra)
if(CUDA_ROOT)
  list(APPEND extra -DCUDAToolkit_ROOT=${CUDA_ROOT})
endif()
run("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release ${extra})
run("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
string(REPLACE "|" ";" launch "${MPIEXEC}")
run("run the consumer on 2 ranks" ${launch} -n 2 ${WORK_DIR}/build/consumer)
# The installed validators (<strata/flag_checks.h>) refuse a bad flag in words, before MPI starts.
execute_process(COMMAND ${WORK_DIR}/build/consumer --steps 0 RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 60)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "--steps: must be an integer from 10 to 1000, got 0")
  message(FATAL_ERROR "consumer --steps 0: expected a refusal naming the range, got (${rc}):\n${out}${err}")
endif()
message(STATUS "consumer --steps 0 refused: ${err}")
