# Token shards through train_gpt (cmake -P): a 4 GiB data file (sparse: 2^31 uint16 tokens, nanoGPT's plain format) is
# memory-mapped, not read into memory: at np 2 what any rank's resident set grew after its runtime started is within
# the model's predicted memory plus 64 MiB, and its peak within 64 MiB of the same run on the 8 KiB tests/data file;
# --val-data gives a validation loss every 2 steps and after the last; a validation file shorter than one window and a
# --data pattern that matches nothing are refused naming them.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>
# -DDATA=<tests/data>.
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

set(model --layers 2 --heads 2 --embd 32 --vocab 64 --ctx 16 --seq 8 --batch 4 --steps 4 --no-progress)
execute_process(COMMAND truncate -s 4294967296 ${WORK}/big.bin RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot make the sparse 4 GiB file ${WORK}/big.bin (truncate: ${rc})")
endif()

# ${name}_rss: the summary's peak_rss_bytes (the largest VmHWM of any rank); ${name}_added: its
# peak_rss_above_start_bytes (the most any rank's resident set grew after its runtime started, before the data and
# the model: without the program and its libraries, which a CUDA build's make about 200 MB).
function(summary_bytes name key var)
  string(REGEX MATCH "\"${key}\":([0-9]+)" _ "${${name}_out}")
  if(NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "${name}: no ${key} in the summary:\n${${name}_out}")
  endif()
  set(${name}_${var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()
macro(peak_rss name)
  summary_bytes(${name} peak_rss_bytes rss)
  summary_bytes(${name} peak_rss_above_start_bytes added)
endmacro()

run_checked(small ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${model} --data ${DATA}/gpt_tiny_tokens.bin
            --val-data ${DATA}/gpt_tiny_val_tokens.bin --eval-every 2 --eval-steps 2)
expect_text(small "eval step 1 val_loss" "eval step 3 val_loss" "\"final_val_loss\":")
run_checked(big ok 300 ${launcher} -n 2 ${TRAIN_GPT} ${model} --data ${WORK}/big.bin)
expect_text(big "step 3 loss")
peak_rss(small)
peak_rss(big)
# The acceptance's own terms as well: the resident set within the model's predicted memory (train_gpt's step-0
# prediction for rank 0, every category) plus 64 MiB.
string(REGEX MATCH "\"step0_memory_rank0\":(\\{\"measured\":\\{[^}]*\\},\"predicted\":\\{[^}]*\\}\\})" _ "${big_out}")
string(JSON predicted GET "${CMAKE_MATCH_1}" predicted total)
math(EXPR allowed "${predicted} + 67108864")
message(STATUS "peak resident set on the 4 GiB file ${big_rss} bytes, ${big_added} of them added after the runtime "
               "started; predicted ${predicted} + 64 MiB = ${allowed}")
if(big_added GREATER allowed)
  message(FATAL_ERROR "the resident set grew ${big_added} bytes after the runtime started, above the model's "
                      "prediction ${predicted} + 64 MiB")
endif()
math(EXPR grew_mib "(${big_rss} - ${small_rss}) / 1048576")
message(STATUS "peak resident set: ${small_rss} bytes on the 8 KiB file, ${big_rss} on the 4 GiB one (+${grew_mib} MiB)")
if(big_rss GREATER small_rss)
  math(EXPR grew "${big_rss} - ${small_rss}")
  if(grew GREATER 67108864)
    message(FATAL_ERROR "the 4 GiB data file added ${grew_mib} MiB to the peak resident set (bound 64 MiB)")
  endif()
endif()

# The resident set is the program's own: started by a shell that held 200 MB before it exec'd (as a launcher that
# forks ranks holds its own), a one-rank run still reports its own few tens of MiB. getrusage's ru_maxrss carries the
# shell's over the exec, and a launcher's over a fork, which a CI machine's mpirun made 194 MB.
run_checked(direct ok 120 ${TRAIN_GPT} ${model} --data ${DATA}/gpt_tiny_tokens.bin)
run_checked(inherited ok 120 bash -c "x=$(printf '%100000000s' '') && exec \"$0\" \"$@\"" ${TRAIN_GPT} ${model}
            --data ${DATA}/gpt_tiny_tokens.bin)
peak_rss(direct)
peak_rss(inherited)
message(STATUS "peak resident set after a 200 MB shell exec'd the run: ${inherited_rss} bytes; started directly "
               "${direct_rss}")
math(EXPR allowed "${direct_rss} + 67108864")
if(inherited_rss GREATER allowed)
  message(FATAL_ERROR "peak_rss_bytes ${inherited_rss} counts the resident set of the shell that started the run "
                      "(started directly: ${direct_rss})")
endif()

file(WRITE ${WORK}/short_val.bin "0123456789")  # 5 tokens: fewer than --seq 8 + 1
run_checked(short_val fail 120 ${launcher} -n 1 ${TRAIN_GPT} ${model} --data ${DATA}/gpt_tiny_tokens.bin
            --val-data ${WORK}/short_val.bin)
expect_text(short_val "short_val.bin" "has 5 tokens; sequence length 8 needs at least 9")
run_checked(no_match fail 120 ${launcher} -n 1 ${TRAIN_GPT} ${model} --data "${WORK}/none_*.bin")
expect_text(no_match "none_*.bin" "matches no file")
