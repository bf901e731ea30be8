# A resume never silently differs from what the user asked (cmake -P, train_gpt at np 2). Each case either refuses
# with the reason (non-zero exit, no step run) or warns loudly ("WARNING: --resume:") and records the warning in the
# run's summary ("resume": {"warnings": [...]}) and in the checkpoints it writes.
#   -DMODE=damaged_newest     latest names a step whose directory lost its COMMITTED marker: resumes from the older
#                             one, warning that the steps after it are trained again (before: silently)
#   -DMODE=nothing_committed  a directory of step directories but nothing committed: refused (before: step 0, exit
#                             0); one with only an interrupted save: step 0 with a warning; a new one: step 0, quietly
#   -DMODE=import_into_run    strata-ckpt import into a training directory: refused, latest untouched (before: latest
#                             re-pointed to the import's step 0)
#   -DMODE=other_run          --heads other than the checkpoint's: refused; another --data file: a warning, recorded;
#                             a checkpoint past --steps: refused; at --steps: "nothing to train" and no claim of a
#                             commit (before: "checkpoint step--0000001 committed")
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DBIN=<directory of train_gpt, strata-ckpt>
# -DWORK=<scratch directory, emptied>.
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
set(gpt ${launcher} -n 2 ${BIN}/train_gpt --no-progress --tokens 4096)

# expect_recorded(<name>): the summary line records a warning of the resume.
function(expect_recorded name)
  if(NOT "${${name}_out}" MATCHES "\"resume\":{\"from_step\":[0-9null]+,\"warnings\":\\[\"")
    message(FATAL_ERROR "${name}: the summary does not record the resume's warning:\n${${name}_out}")
  endif()
endfunction()

if(MODE STREQUAL "damaged_newest")
  run_checked(saved ok 60 ${gpt} --steps 4 --checkpoint-dir ckpt --checkpoint-every 2 --keep-checkpoints 3)
  file(REMOVE ${WORK}/ckpt/step-00000004/COMMITTED)
  run_checked(resumed ok 60 ${gpt} --steps 6 --checkpoint-dir ckpt --resume)
  expect_text(resumed "WARNING: --resume: ckpt/latest names 'step-00000004', which is not a committed checkpoint (its "
                      "directory has no COMMITTED marker or no index.json: damaged): resuming from step-00000002, the "
                      "newest committed one; the steps after it are trained again"
              "resumed from ckpt/step-00000002")
  expect_recorded(resumed)
  # The warning travels with the run: the checkpoint it wrote records it.
  file(READ ${WORK}/ckpt/step-00000006/index.json index)
  if(NOT index MATCHES "\"resume_notes\": \\[[ \n]*\"ckpt/latest names 'step-00000004'")
    message(FATAL_ERROR "the new checkpoint does not record the resume's warning:\n${index}")
  endif()
elseif(MODE STREQUAL "nothing_committed")
  run_checked(saved ok 60 ${gpt} --steps 2 --checkpoint-dir ckpt)
  file(REMOVE ${WORK}/ckpt/step-00000002/COMMITTED)
  run_checked(uncommitted fail 40 ${gpt} --steps 4 --checkpoint-dir ckpt --resume)
  expect_text(uncommitted "--resume: ckpt holds no committed checkpoint, yet step-00000002 has no COMMITTED marker"
                          "starting from step 0 would silently replace that run")
  expect_no_steps_after(uncommitted -1)
  # Only a save a crash interrupted: nothing was ever committed, so step 0, with a warning naming it.
  file(MAKE_DIRECTORY ${WORK}/interrupted/step-00000002.tmp)
  run_checked(interrupted ok 40 ${gpt} --steps 1 --checkpoint-dir interrupted --resume)
  expect_text(interrupted "WARNING: --resume: interrupted/step-00000002.tmp is a save that was interrupted"
                          "no committed checkpoint in interrupted (see the warnings above): starting from step 0")
  expect_recorded(interrupted)
  run_checked(new_dir ok 40 ${gpt} --steps 1 --checkpoint-dir new_dir --resume)
  expect_text(new_dir "no committed checkpoint in new_dir (a new directory): starting from step 0")
  string(FIND "${new_dir_out}" "WARNING" warned)
  if(NOT warned EQUAL -1)
    message(FATAL_ERROR "new_dir: a first run in a new directory warned:\n${new_dir_out}")
  endif()
elseif(MODE STREQUAL "import_into_run")
  run_checked(saved ok 60 ${gpt} --steps 2 --checkpoint-dir run --save w.safetensors)
  run_checked(import fail 20 ${BIN}/strata-ckpt import w.safetensors run)
  expect_text(import "strata-ckpt: " "run already holds checkpoints (latest step-00000002): an import there would "
                     "its latest at the import's step 0")
  file(READ ${WORK}/run/latest latest)
  if(NOT latest STREQUAL "step-00000002\n")
    message(FATAL_ERROR "the refused import changed latest to '${latest}'")
  endif()
  run_checked(import_new ok 20 ${BIN}/strata-ckpt import w.safetensors fresh)
elseif(MODE STREQUAL "other_run")
  run_checked(make_a ok 20 ${launcher} -n 1 ${BIN}/train_gpt --make-data a.bin --tokens 4096 --seed 1)
  run_checked(make_b ok 20 ${launcher} -n 1 ${BIN}/train_gpt --make-data b.bin --tokens 4096 --seed 2)
  run_checked(saved ok 60 ${gpt} --steps 4 --checkpoint-dir ckpt --data a.bin)
  run_checked(heads fail 40 ${gpt} --steps 6 --checkpoint-dir ckpt --data a.bin --resume --heads 4)
  expect_text(heads "was trained with 2 attention heads, this run has --heads 4")
  expect_no_steps_after(heads -1)
  run_checked(past fail 40 ${gpt} --steps 3 --checkpoint-dir ckpt --data a.bin --resume)
  expect_text(past "--resume: the checkpoint is at step 4, past --steps 3: nothing to train")
  expect_no_steps_after(past -1)
  run_checked(at_end ok 40 ${gpt} --steps 4 --checkpoint-dir ckpt --data a.bin --resume)
  expect_text(at_end "nothing to train: the checkpoint is at step 4, where --steps ends"
                     "no checkpoint written: ckpt/step-00000004, which this run resumed from, is where it stands")
  string(FIND "${at_end_out}" "step--" bogus)
  if(NOT bogus EQUAL -1)
    message(FATAL_ERROR "at_end: the report names a checkpoint that was never written:\n${at_end_out}")
  endif()
  run_checked(other_data ok 60 ${gpt} --steps 5 --checkpoint-dir ckpt --data b.bin --resume)
  expect_text(other_data "WARNING: --resume: the checkpoint was trained on a.bin (4096 tokens, crc32:"
                         "this run reads b.bin (4096 tokens, crc32:" "its data position (32 rows done) continues in "
                         "other data")
  expect_recorded(other_data)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
