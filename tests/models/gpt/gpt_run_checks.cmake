# Checks shared by the train_gpt run scripts (checkpoint_runs.cmake, tp_checkpoint_runs.cmake, tp_runs.cmake,
# pp_runs.cmake, bf16_runs.cmake): reading --metrics files and comparing steps between runs, bit for bit or within
# 1e-5, in CMake (no other interpreter is needed), and holding a run to a reference through compare_runs.

# compare_verdict(<rc var> <verdict var> compare_runs arguments...): compare_runs' exit status, and its verdict line
# without a failure's per-tensor lines. Needs COMPARE.
function(compare_verdict rc_var verdict_var)
  execute_process(COMMAND ${COMPARE} ${ARGN} OUTPUT_VARIABLE verdict RESULT_VARIABLE rc)
  string(REGEX REPLACE "\n  [^\n]*" "" verdict "${verdict}")
  string(STRIP "${verdict}" verdict)
  set(${rc_var} ${rc} PARENT_SCOPE)
  set(${verdict_var} "${verdict}" PARENT_SCOPE)
endfunction()

# compare_to(<got> <ref> <loss tol> <norm tol> [<param tol>]): compare_runs on ${WORK}/<ref>.jsonl and <got>.jsonl,
# and with a parameter tolerance on their .safetensors too; prints the verdict (without a failure's per-tensor lines)
# and appends "<got> vs <ref>" to `failed` in the caller when they differ. Needs COMPARE and WORK.
function(compare_to got ref loss_tol norm_tol)
  set(files ${WORK}/${ref}.jsonl ${WORK}/${got}.jsonl)
  set(param_tol 1)
  if(ARGC GREATER 4)
    set(param_tol ${ARGV4})
    list(APPEND files ${WORK}/${ref}.safetensors ${WORK}/${got}.safetensors)
  endif()
  compare_verdict(rc verdict ${loss_tol} ${norm_tol} ${param_tol} ${files})
  message(STATUS "${got} vs ${ref}: ${verdict}")
  if(NOT rc EQUAL 0)
    set(failed ${failed} "${got} vs ${ref}" PARENT_SCOPE)
  endif()
endfunction()

# expect_differs(<got> <ref> <loss tol>): the losses of ${WORK}/<got>.jsonl and <ref>.jsonl differ by more than
# <loss tol> relative at some step (compare_runs exits 1 on the loss alone); appends "<got> equals <ref>" to `failed`
# in the caller when they do not. Needs COMPARE and WORK.
function(expect_differs got ref loss_tol)
  compare_verdict(rc verdict ${loss_tol} 1e30 1 ${WORK}/${ref}.jsonl ${WORK}/${got}.jsonl)
  message(STATUS "${got} vs ${ref}, expected to differ: ${verdict}")
  if(NOT rc EQUAL 1)
    set(failed ${failed} "${got} equals ${ref} (compare_runs exit ${rc})" PARENT_SCOPE)
  endif()
endfunction()

# read_metrics(<name> <file>): <name>_steps (the steps in order), <name>_loss_<step> and <name>_norm_<step>, as written
# (nlohmann::json prints the shortest text that reads back as the same double: equal text is equal bits). A resumed run
# appends to its file: a step recorded again replaces that step's record and every later one (the run went back).
function(read_metrics name file)
  file(STRINGS "${file}" lines)
  set(steps)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "\"step\":([0-9]+)")
      message(FATAL_ERROR "${file}: a record without a step: ${line}")
    endif()
    set(step ${CMAKE_MATCH_1})
    list(FIND steps ${step} again)
    if(NOT again EQUAL -1)
      list(SUBLIST steps 0 ${again} steps)
    endif()
    list(APPEND steps ${step})
    string(REGEX MATCH "\"loss\":([^,}]+)" _ "${line}")
    set(${name}_loss_${step} ${CMAKE_MATCH_1} PARENT_SCOPE)
    string(REGEX MATCH "\"grad_norm\":([^,}]+)" _ "${line}")
    set(${name}_norm_${step} ${CMAKE_MATCH_1} PARENT_SCOPE)
  endforeach()
  set(${name}_steps ${steps} PARENT_SCOPE)
endfunction()

# A plain decimal as an integer of 1e-12 (CMake's math is 64-bit integers only).
function(to_fixed value out)
  if(NOT value MATCHES "^([0-9]+)(\\.([0-9]+))?$")
    message(FATAL_ERROR "'${value}' is not a plain decimal")
  endif()
  set(whole ${CMAKE_MATCH_1})
  set(frac "${CMAKE_MATCH_3}000000000000")
  string(SUBSTRING "${frac}" 0 12 frac)
  string(REGEX REPLACE "^0+([0-9])" "\\1" frac "${frac}")
  string(REGEX REPLACE "^0+([0-9])" "\\1" whole "${whole}")
  if(whole GREATER 90000)
    message(FATAL_ERROR "'${value}' is too large to compare")
  endif()
  math(EXPR fixed "${whole} * 1000000000000 + ${frac}")
  set(${out} ${fixed} PARENT_SCOPE)
endfunction()

# expect_steps(<got> <want> <first> <last> <exact|relative>): steps first..last of metrics <got> equal <want>'s, as
# text (bitwise), or within 1e-5 relative; <got> holds exactly those steps. Prints the largest relative difference.
macro(expect_steps got want first last how)
  set(expected_steps)
  foreach(s RANGE ${first} ${last})
    list(APPEND expected_steps ${s})
  endforeach()
  if(NOT "${${got}_steps}" STREQUAL "${expected_steps}")
    message(FATAL_ERROR "${got}: steps ${${got}_steps}, expected ${first}..${last}")
  endif()
  set(worst_loss 0)  # in units of 1e-9 relative
  set(worst_norm 0)
  foreach(s RANGE ${first} ${last})
    foreach(field loss norm)
      set(a "${${got}_${field}_${s}}")
      set(b "${${want}_${field}_${s}}")
      foreach(v a b)  # train_gpt writes a non-finite value as null: equal text must not pass it
        if(NOT "${${v}}" MATCHES "^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$")
          message(FATAL_ERROR "${got} step ${s}: ${field} '${${v}}' (${v}) is not a finite number")
        endif()
      endforeach()
      if("${how}" STREQUAL "exact")
        if(NOT a STREQUAL b)
          message(FATAL_ERROR "${got} step ${s}: ${field} ${a}, ${want} has ${b} (not bitwise equal)")
        endif()
      else()
        to_fixed("${a}" an)
        to_fixed("${b}" bn)
        math(EXPR diff "${an} - ${bn}")
        if(diff LESS 0)
          math(EXPR diff "0 - ${diff}")
        endif()
        # diff / b <= 1e-5, plus one unit of the 12th decimal. No product of diff: CMake's 64-bit math wraps silently,
        # and a wrapped product once let any difference above ~92 through.
        math(EXPR limit "${bn} / 100000 + 1")
        if(diff GREATER limit)
          message(FATAL_ERROR "${got} step ${s}: ${field} ${a} differs from ${want}'s ${b} by more than 1e-5 relative")
        endif()
        # diff / b in units of 1e-9, as diff * 1e4 / (b / 1e5): diff <= b / 1e5 + 1 <= 9e11 here, so no wrap.
        math(EXPR rel "${diff} * 10000 / (${bn} / 100000 + 1)")
        if(rel GREATER worst_${field})
          set(worst_${field} ${rel})
        endif()
      endif()
    endforeach()
  endforeach()
  if("${how}" STREQUAL "exact")
    message(STATUS "${got}: steps ${first}-${last} equal ${want}'s bit for bit")
  else()
    message(STATUS "${got}: steps ${first}-${last} equal ${want}'s within 1e-5; largest relative difference: "
                   "loss ${worst_loss}e-9, grad_norm ${worst_norm}e-9")
  endif()
endmacro()

macro(expect_in name text)
  string(FIND "${${name}_out}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${name}: the output does not say '${text}':\n${${name}_out}")
  endif()
endmacro()

# refused_layout(<name> <np> <text> train_gpt arguments...): train_gpt at <np> ranks (launcher: the '|'-separated
# MPIEXEC) must fail cleanly (a non-zero exit, not a signal or a timeout), before any step, saying <text>.
function(refused_layout name np text)
  string(REPLACE "|" ";" launch "${MPIEXEC}")
  set(argv ${launch} -n ${np} ${TRAIN_GPT} ${ARGN})
  execute_process(COMMAND ${argv} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
  if(rc EQUAL 0 OR NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "bad layout ${name}: expected a failure, got ${rc}: ${argv}\n${out}\n${err}")
  endif()
  string(FIND "${out}\n${err}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bad layout ${name}: the output does not say '${text}':\n${out}\n${err}")
  endif()
  if(out MATCHES "(^|\n)step 0 ")
    message(FATAL_ERROR "bad layout ${name}: a step ran before the error:\n${out}")
  endif()
  message(STATUS "bad layout ${name} (np ${np}): refused saying '${text}'")
endfunction()

# train_saved(<name> <np> train_gpt arguments...): train_gpt at <np> ranks (launcher: the '|'-separated MPIEXEC) with
# the caller's `common` flags, its metrics and final weights in WORK (<name>.jsonl, <name>.safetensors), through
# run_checked (run_checks.cmake: its command and output in <name>.log; a failure stops the script). Sets <name>_out
# (its output) in the caller.
function(train_saved name np)
  string(REPLACE "|" ";" launch "${MPIEXEC}")
  run_checked(${name} ok 180 ${launch} -n ${np} ${TRAIN_GPT} ${common} --metrics ${WORK}/${name}.jsonl
              --save ${WORK}/${name}.safetensors ${ARGN})
  set(${name}_out "${${name}_out}" PARENT_SCOPE)
endfunction()

# flip_middle_byte(<file> <rc_var>): the byte in the middle of <file> becomes 'Z' (or 'Y' where it was 'Z'), through
# dd, so a checksum over it fails; <rc_var> is dd's exit status.
function(flip_middle_byte file rc_var)
  find_program(DD dd REQUIRED)
  file(SIZE ${file} bytes)
  math(EXPR middle "${bytes} / 2")
  file(READ ${file} old OFFSET ${middle} LIMIT 1 HEX)
  if(old STREQUAL "5a")
    file(WRITE ${WORK}/byte "Y")
  else()
    file(WRITE ${WORK}/byte "Z")
  endif()
  execute_process(COMMAND ${DD} if=${WORK}/byte of=${file} bs=1 seek=${middle} count=1 conv=notrunc
                  RESULT_VARIABLE rc ERROR_QUIET)
  set(${rc_var} ${rc} PARENT_SCOPE)
endfunction()
