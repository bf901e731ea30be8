# Named shapes and MFU through train_gpt (cmake -P): --model gpt2-124m with its depth overridden, at np 2, prints the
# model FLOPs per token of docs/gpt-model.md (6 N + 12 L C T, N every weight but wpe) and per step the achieved TFLOP/s
# and MFU; with --peak-tflops 1 the MFU equals the TFLOP/s exactly (written as the same JSON number). Without a peak on
# the CPU there is no MFU (null in the JSON); an unknown --model names the known ones.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>.
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# gpt2-124m's width, vocabulary and positions at one layer and 16 tokens a row.
set(small --model gpt2-124m --layers 1 --seq 16 --batch 1 --steps 4 --tokens 4096 --no-progress)
math(EXPR C 768)
math(EXPR params "12 * ${C} * ${C} + 13 * ${C} + 50304 * ${C} + 2 * ${C}")  # one block, wte, ln_f
math(EXPR per_token "6 * ${params} + 12 * 1 * ${C} * 16")
math(EXPR all_params "${params} + 1024 * ${C}")  # and wpe, 1024 positions

run_checked(peak ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${small} --peak-tflops 1 --metrics ${WORK}/peak.jsonl)
expect_text(peak "GPT-2 L=1 H=12 C=768 V=50304 ctx=1024, ${all_params} parameters"
            "model FLOPs per token (6 x ${params} parameters" "MFU against 1.0 TFLOP/s per device (--peak-tflops)"
            "\"flops_per_token\":${per_token}" "\"peak_source\":\"--peak-tflops\"")
string(REGEX MATCHALL "(^|\n)step [0-9]+ loss [^\n]* tflops [0-9.e+-]+ mfu [0-9.]+%" lines "${peak_out}")
list(LENGTH lines n)
if(NOT n EQUAL 4)
  message(FATAL_ERROR "peak: expected 4 step lines with tflops and mfu, found ${n}:\n${peak_out}")
endif()
file(STRINGS ${WORK}/peak.jsonl records)
foreach(r IN LISTS records)
  string(JSON tflops GET "${r}" model_tflops_per_device)
  string(JSON mfu GET "${r}" mfu)
  if(NOT tflops STREQUAL mfu OR tflops STREQUAL "0")
    message(FATAL_ERROR "peak: with a peak of 1 TFLOP/s the MFU (${mfu}) must equal the TFLOP/s (${tflops}): ${r}")
  endif()
endforeach()

run_checked(no_peak ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${small} --steps 1 --metrics ${WORK}/no_peak.jsonl)
expect_text(no_peak "no MFU: the peak of 'cpu' is not known (give --peak-tflops)" "\"mfu\":null")
string(FIND "${no_peak_out}" " mfu " at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "no_peak: an MFU was printed without a peak:\n${no_peak_out}")
endif()

run_checked(unknown fail 60 ${launcher} -n 2 ${TRAIN_GPT} --model gpt2-xl --steps 1)
expect_text(unknown "--model 'gpt2-xl' is not a known model (known: gpt2-124m, gpt2-350m, llama-tiny, llama3-8b, llama2-70b)")
