# Start-up configuration agreement through the tools, launched MPMD with one setting differing on rank 1
# (cmake -P, so no other interpreter is needed):
#   -DMODE=lr              train_gpt --lr 1e-3 on rank 0, 2e-3 on rank 1 (and first the same flags on both: it trains)
#   -DMODE=steps           train_gpt --steps 3 on rank 0, 2 on rank 1
#   -DMODE=custom_trainer  custom_trainer --lr 0.01 on rank 0, 0.02 on rank 1
# A differing run must fail before any step, with a message naming the setting, both values and the ranks.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCUSTOM_TRAINER=<binary>.
string(REPLACE "|" ";" launcher "${MPIEXEC}")
set(gpt_common --no-progress --steps 3 --tokens 4096)

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

# run_mpmd(<expect: ok|fail> <rank 0 command list name> <rank 1 command list name>): sets `out` in the caller.
function(run_mpmd expect rank0_var rank1_var)
  run_checked(mpmd ${expect} 90 ${launcher} -n 1 ${${rank0_var}} : -n 1 ${${rank1_var}})
  set(out "${mpmd_out}" PARENT_SCOPE)
endfunction()

# expect_says(<text>...): every text appears in `out`, and no step ran.
function(expect_says)
  foreach(t IN LISTS ARGN)
    string(FIND "${out}" "${t}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the output does not say '${t}':\n${out}")
    endif()
  endforeach()
  if(out MATCHES "(^|\n)step +0 ")
    message(FATAL_ERROR "a step ran although the configurations differ:\n${out}")
  endif()
endfunction()

if(MODE STREQUAL "lr")
  set(same ${TRAIN_GPT} ${gpt_common} --lr 1e-3)
  run_mpmd(ok same same)
  set(other ${TRAIN_GPT} ${gpt_common} --lr 2e-3)
  run_mpmd(fail same other)
  expect_says("configuration differs across ranks: --lr: 0.001 on rank 0; 0.002 on rank 1")
elseif(MODE STREQUAL "steps")
  set(first ${TRAIN_GPT} ${gpt_common} --steps 3)
  set(second ${TRAIN_GPT} ${gpt_common} --steps 2)
  run_mpmd(fail first second)
  expect_says("configuration differs across ranks: --steps: 3 on rank 0; 2 on rank 1")
elseif(MODE STREQUAL "custom_trainer")
  set(first ${CUSTOM_TRAINER} --steps 2 --lr 0.01)
  set(second ${CUSTOM_TRAINER} --steps 2 --lr 0.02)
  run_mpmd(fail first second)
  expect_says("configuration differs across ranks: --lr: 0.01 on rank 0; 0.02 on rank 1")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
