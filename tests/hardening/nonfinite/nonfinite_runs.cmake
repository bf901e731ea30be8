# Non-finite state and strict loading through train_gpt at np 2 (cmake -P, so no other interpreter is needed). Every
# weight file is made by the tools themselves (train_gpt --save, strata-ckpt import), a NaN put in with dd.
#   -DMODE=absurd_lr          --lr 1e30: step 0 leaves finite weights near 1e30, every later step's gradients are NaN;
#                             the default --max-skipped-steps 10 stops the run at step 10 naming step 1 and the first
#                             parameter; --save writes nothing.
#   -DMODE=update_overflow    --lr 1e38: step 0's update itself overflows; the run stops there naming the parameter.
#   -DMODE=skipped_steps      an --init file of such weights: every step skipped from step 0; --max-skipped-steps 3
#                             stops at step 2 naming step 0; --max-skipped-steps 0 never stops.
#   -DMODE=skipped_steps_f16  the same under f16: the 16 skips while the loss scale backs off from 65536 to 1 do not
#                             count, the next 3 do (stop at step 18).
#   -DMODE=init_nan           a NaN at element 5 of h.0.mlp.c_fc.weight in an --init file: refused, naming both.
#   -DMODE=resume_nan         strata-ckpt import refuses the same weights; a checkpoint imported clean and holding them
#                             behind valid checksums (damage_checkpoint): --resume refuses it.
#   -DMODE=init_unknown       a 2-layer file into a 1-layer model: refused, listing the 12 tensors of block 1.
#   -DMODE=init_missing       a 1-layer file into a 3-layer model: refused, listing the 24 missing (20 shown).
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DSTRATA_CKPT=<binary>
# -DDAMAGE=<damage_checkpoint> -DWORK=<scratch directory, emptied>.

set(common --no-progress)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

# run_gpt(<name> <expect> args...): train_gpt at np 2.
macro(run_gpt name expect)
  run_checked(${name} ${expect} 60 ${launcher} -n 2 ${TRAIN_GPT} ${common} ${ARGN})
endmacro()

macro(expect_says name)
  expect_text(${name} ${ARGN})
endmacro()

macro(expect_no_file path)
  file(GLOB tmps "${path}.tmp*")
  if(EXISTS "${path}" OR tmps)
    message(FATAL_ERROR "${path} (or a temporary of it: ${tmps}) was written")
  endif()
endmacro()

include(${CMAKE_CURRENT_LIST_DIR}/../../support/safetensors_poke.cmake)
# put_nan(<file> <tensor> <element>): overwrites one F32 element of a safetensors file with NaN (bytes ff ff ff ff).
function(put_nan file tensor element)
  safetensors_put_f32(${file} ${tensor} ${element} "\\377\\377\\377\\377")
endfunction()

if(MODE STREQUAL "absurd_lr")
  run_gpt(absurd fail --lr 1e30 --steps 20 --save ${WORK}/w.safetensors)
  expect_says(absurd "training stops at step 10: 10 steps in a row skipped for non-finite gradients"
              "The first skipped step, 1, had its first non-finite gradient in 'wte.weight' (unit 0, slot 0)")
  expect_no_steps_after(absurd 9)
  expect_no_file(${WORK}/w.safetensors)
elseif(MODE STREQUAL "update_overflow")
  run_gpt(overflow fail --lr 1e38 --steps 20 --save ${WORK}/w.safetensors)
  expect_says(overflow "training stops at step 0: its AdamW update (lr 1e+38) made a weight non-finite: "
              "'wte.weight' (unit 0, slot 0), element 0 is")
  expect_no_file(${WORK}/w.safetensors)
elseif(MODE MATCHES "^skipped_steps")
  # Weights near 1e30 are finite (a valid --init) but overflow the forward pass: every gradient is NaN.
  run_gpt(huge ok --lr 1e30 --steps 1 --save ${WORK}/huge.safetensors)
  if(MODE STREQUAL "skipped_steps")
    run_gpt(stops fail --init ${WORK}/huge.safetensors --steps 30 --max-skipped-steps 3)
    expect_says(stops "training stops at step 2: 3 steps in a row skipped for non-finite gradients (max_skipped_steps 3"
                "The first skipped step, 0, had its first non-finite gradient in 'wte.weight' (unit 0, slot 0)"
                "step 1 skipped on every rank")
    expect_no_steps_after(stops 1)
    run_gpt(never ok --init ${WORK}/huge.safetensors --steps 12 --max-skipped-steps 0)
    string(REGEX MATCHALL "(^|\n)step [0-9]+ loss [^\n]* skipped" skipped "${never_out}")
    list(LENGTH skipped count)
    if(NOT count EQUAL 12)
      message(FATAL_ERROR "never: ${count} skipped steps printed, expected 12:\n${never_out}")
    endif()
  else()
    run_gpt(stops fail --init ${WORK}/huge.safetensors --param-dtype f16 --steps 30 --max-skipped-steps 3)
    expect_says(stops "training stops at step 18: 19 steps in a row skipped for non-finite gradients, 3 of them with "
                      "the loss scale at its minimum 1 (max_skipped_steps 3"
                "The first skipped step, 0, had its first non-finite gradient in 'wte.weight'")
    expect_no_steps_after(stops 17)
  endif()
elseif(MODE STREQUAL "init_nan")
  run_gpt(good ok --steps 0 --save ${WORK}/nan.safetensors)
  put_nan(${WORK}/nan.safetensors h.0.mlp.c_fc.weight 5)
  run_gpt(refused fail --init ${WORK}/nan.safetensors --steps 2)
  expect_says(refused "--init ${WORK}/nan.safetensors: tensor 'h.0.mlp.c_fc.weight' holds NaN at element 5")
  expect_no_steps_after(refused -1)
elseif(MODE STREQUAL "resume_nan")
  run_gpt(good ok --steps 0 --save ${WORK}/nan.safetensors)
  put_nan(${WORK}/nan.safetensors h.0.mlp.c_fc.weight 5)
  # strata-ckpt import refuses the file; the same values planted in a checkpoint behind valid checksums instead.
  run_checked(import_nan fail 60 ${STRATA_CKPT} import ${WORK}/nan.safetensors ${WORK}/ckpt_nan)
  expect_says(import_nan "tensor 'h.0.mlp.c_fc.weight' holds NaN at element 5")
  run_gpt(clean ok --steps 0 --save ${WORK}/clean.safetensors)
  run_checked(import ok 60 ${STRATA_CKPT} import ${WORK}/clean.safetensors ${WORK}/ckpt)
  run_checked(damage ok 20 ${DAMAGE} ${WORK}/ckpt/step-00000000 value params/h.0.mlp.c_fc.weight nan 5)
  run_gpt(refused fail --checkpoint-dir ${WORK}/ckpt --resume --steps 2)
  expect_says(refused "loading ${WORK}/ckpt/step-00000000: its weights are not finite: 'h.0.mlp.c_fc.weight'"
              "element 5 is NaN")
  expect_no_steps_after(refused -1)
elseif(MODE STREQUAL "init_unknown")
  run_gpt(two ok --layers 2 --steps 0 --save ${WORK}/two.safetensors)
  run_gpt(refused fail --layers 1 --init ${WORK}/two.safetensors --steps 2)
  expect_says(refused "does not match the model's 16 parameters"
              "12 tensor(s) that are not parameters of this model: 'h.1.attn.c_attn.bias', 'h.1.attn.c_attn.weight', "
              "'h.1.mlp.c_proj.weight'")
  string(FIND "${refused_out}" "missing" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "refused: nothing is missing, yet the output says so:\n${refused_out}")
  endif()
  expect_no_steps_after(refused -1)
elseif(MODE STREQUAL "init_missing")
  run_gpt(one ok --layers 1 --steps 0 --save ${WORK}/one.safetensors)
  run_gpt(refused fail --layers 3 --init ${WORK}/one.safetensors --steps 2)
  expect_says(refused "24 parameter(s) missing: 'h.1.attn.c_attn.bias', 'h.1.attn.c_attn.weight'"
              "'h.2.ln_2.weight' and 4 more")
  expect_no_steps_after(refused -1)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
