# A checkpoint is checked for values, not only checksums (cmake -P). train_gpt (np 2) writes a checkpoint; copies of it
# are damaged by damage_checkpoint so that every checksum still matches; then --resume, strata-ckpt verify and export
# must each refuse it, naming the tensor (or the field) and the value, before any step (before: each loaded it, verify
# said OK, export wrote the weights, and the first step failed with advice to lower the learning rate, or trained on).
#   -DMODE=moments  exp_avg_sq -1 and NaN, exp_avg inf, params inf (export too)
#   -DMODE=state    trainer state out of range or of the wrong type (next_step -1, rows_done -1, next_step "3"), an
#                   optimizer loss scale of 0, one digit of the index changed (its own checksum), and an index from
#                   before index checksums (loads, with a warning; verify says OK with a note)
#   -DMODE=tooling  verify with `latest` naming a missing step (FAILED), an uncommitted step directory pruned by the next
#                   commit, import of NaN weights refused with nothing committed, strata-generate --heads against the
#                   checkpoint's record, a run whose every step was skipped saying so
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DBIN=<directory of train_gpt, strata-ckpt> -DDAMAGE=<binary>
# -DWORK=<scratch directory, emptied>.
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
set(gpt ${launcher} -n 2 ${BIN}/train_gpt --no-progress --tokens 4096)
set(ckpt ${BIN}/strata-ckpt)

run_checked(saved ok 60 ${gpt} --steps 3 --checkpoint-dir ckpt)

# damaged(<name> <damage args>...): a copy of the checkpoint in WORK/<name>, damaged.
function(damaged name)
  file(COPY ${WORK}/ckpt/ DESTINATION ${WORK}/${name})
  file(REMOVE ${WORK}/${name}/.lock)
  run_checked(damage_${name} ok 20 ${DAMAGE} ${WORK}/${name}/step-00000003 ${ARGN})
endfunction()

# refused(<name> <texts>...): --resume and verify both fail, each saying every text (the resume says
# `resume_says` instead when set); no step ran.
function(refused name)
  run_checked(${name}_resume fail 40 ${gpt} --steps 5 --checkpoint-dir ${name} --resume)
  if(resume_says)
    expect_text(${name}_resume ${resume_says})
  else()
    expect_text(${name}_resume ${ARGN})
  endif()
  expect_no_steps_after(${name}_resume -1)
  run_checked(${name}_verify fail 20 ${ckpt} verify ${name})
  expect_text(${name}_verify "verify: step-00000003 FAILED" ${ARGN})
endfunction()

if(MODE STREQUAL "moments")
  foreach(case "sq_negative|exp_avg_sq/|-1|holds -1 at element 0 (a second moment is a mean of squares, never negative)"
               "sq_nan|exp_avg_sq/|nan|holds NaN at element 0 (values must be finite)"
               "avg_inf|exp_avg/|inf|holds inf at element 0 (values must be finite)"
               "params_inf|params/|inf|holds inf at element 0")
    string(REPLACE "|" ";" case "${case}")
    list(GET case 0 name)
    list(GET case 1 prefix)
    list(GET case 2 value)
    list(GET case 3 says)
    damaged(${name} value ${prefix} ${value})
    set(resume_says)
    if(name STREQUAL "params_inf")  # the masters' check, over every rank (it names the slot and element)
      set(resume_says "its weights are not finite: '" "element 0 is inf")
    endif()
    refused(${name} "tensor '${prefix}" "${says}")
  endforeach()
  run_checked(export_params_inf fail 20 ${ckpt} export params_inf w.safetensors)
  expect_text(export_params_inf "tensor 'params/" "holds inf at element 0" "not exported")
  if(EXISTS ${WORK}/w.safetensors)
    message(FATAL_ERROR "export wrote weights that are not finite")
  endif()
elseif(MODE STREQUAL "state")
  damaged(next_negative state next_step -1)
  refused(next_negative ".state.trainer.next_step: expected an integer in [0, 2^31 - 1], got -1")
  damaged(rows_negative state rows_done -1)
  refused(rows_negative ".state.trainer.rows_done: expected an integer in [0, 2^62], got -1")
  damaged(next_string state next_step "\"3\"")
  refused(next_string "step-00000003/index.json: .state.trainer.next_step: expected an integer, got a string \"3\"")
  damaged(scale_zero state optimizer.loss_scale 0)
  refused(scale_zero ".state.optimizer.loss_scale: expected a number in (0, ")
  damaged(digit digit)
  refused(digit "index.json: its contents do not match its checksum")
  # From before index checksums: loads, named in a warning; verify says OK with a note.
  damaged(legacy no-checksum)
  run_checked(legacy_resume ok 40 ${gpt} --steps 4 --checkpoint-dir legacy --resume)
  expect_text(legacy_resume "carries no checksum of its own" "resumed from legacy/step-00000003")
  run_checked(legacy_verify ok 20 ${ckpt} verify legacy --step 3)
  expect_text(legacy_verify "verify: step-00000003 OK" "note: " "carries no checksum of its own")
elseif(MODE STREQUAL "tooling")
  # strata-ckpt verify with a `latest` that names a step that is not there: FAILED naming it (before: OK).
  file(COPY ${WORK}/ckpt/ DESTINATION ${WORK}/latest_gone)
  file(REMOVE ${WORK}/latest_gone/.lock)
  file(WRITE ${WORK}/latest_gone/latest "step-00000009\n")
  run_checked(latest_gone fail 20 ${ckpt} verify latest_gone)
  expect_text(latest_gone "verify: step-00000003 FAILED"
              "latest_gone/latest names 'step-00000009', which is not a committed checkpoint here")
  # A step directory without its COMMITTED marker, older than the run's next commit, is pruned with the .tmp saves
  # (before: kept for ever).
  file(MAKE_DIRECTORY ${WORK}/ckpt/step-00000001)
  file(WRITE ${WORK}/ckpt/step-00000001/rank-00000.bin "half a removal")
  run_checked(pruned ok 60 ${gpt} --steps 4 --checkpoint-dir ckpt --resume)
  if(EXISTS ${WORK}/ckpt/step-00000001)
    message(FATAL_ERROR "the uncommitted ckpt/step-00000001 was not pruned by the commit of step 4")
  endif()
  # strata-ckpt import of weights holding NaN: refused naming the tensor and element, nothing committed (before: a
  # checkpoint that resume then refused).
  include(${CMAKE_CURRENT_LIST_DIR}/../../support/safetensors_poke.cmake)
  run_checked(exported ok 30 ${ckpt} export ckpt clean.safetensors)
  file(COPY_FILE ${WORK}/clean.safetensors ${WORK}/nan.safetensors)
  safetensors_put_f32(${WORK}/nan.safetensors h.1.attn.c_proj.weight 7 "\\377\\377\\377\\377")  # a NaN
  run_checked(import_nan fail 30 ${ckpt} import nan.safetensors imported)
  expect_text(import_nan "import: nan.safetensors: tensor 'h.1.attn.c_proj.weight' holds NaN at element 7"
              "nothing was imported")
  file(GLOB left ${WORK}/imported/step-*)
  if(left OR EXISTS ${WORK}/imported/latest)
    message(FATAL_ERROR "the refused import left ${left} in ${WORK}/imported")
  endif()
  run_checked(import_clean ok 30 ${ckpt} import clean.safetensors imported_clean)
  # strata-generate --heads against the heads the checkpoint records (before: 4 heads decoded a 2-head model).
  run_checked(generate_heads fail 60 ${launcher} -n 1 ${BIN}/strata-generate --checkpoint ckpt --heads 4
              --tokens 1,2,3 --max-new-tokens 4)
  expect_text(generate_heads "--heads 4: the checkpoint" "was trained with 2 heads (its record); drop --heads or give 2")
  # A run whose every step was skipped (it resumed weights a learning rate of 1e30 blew up) says so in a line and in
  # steps_skipped (before: a null loss and exit 0, nothing else).
  run_checked(diverged ok 60 ${gpt} --steps 1 --lr 1e30 --checkpoint-dir diverged)
  run_checked(all_skipped ok 60 ${gpt} --steps 3 --lr 1e30 --checkpoint-dir diverged --resume)
  expect_text(all_skipped "train_gpt: warning: all 2 steps were skipped (non-finite gradients)" "\"steps_skipped\":2")
  run_checked(generate_record ok 60 ${launcher} -n 1 ${BIN}/strata-generate --checkpoint ckpt --tokens 1,2,3
              --max-new-tokens 4)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
