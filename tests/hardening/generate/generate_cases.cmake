# strata-generate's BAD cases of issue 52 (cmake -P, so no other interpreter is needed), on tests/data's
# gpt_gen_init.safetensors (2 layers, 2 heads, vocab 64) and checkpoints strata-ckpt imports from it:
#   -DMODE=settings_differ  ranks launched MPMD (np 2) with one setting differing: --step, --checkpoint, --temperature,
#                           --tokens, --max-new-tokens, --tp. Each is refused by the start-up agreement within seconds,
#                           naming the flag, both values and the ranks (before: wrong tokens and exit 0, or a wait until
#                           STRATA_TIMEOUT_S); the same flags on both ranks still generate.
#   -DMODE=nonfinite        a NaN at element 5 of h.0.mlp.c_fc.weight and an inf at element 3 of ln_f.weight, in a
#                           safetensors file and in a checkpoint imported from it, resident and streamed from disk, at
#                           one rank and at tp 2: refused naming the tensor and element, no token printed (before:
#                           "0: 0,0,0,..." and exit 0).
#   -DMODE=threads          --threads beyond flags::max_threads() refused with its range by strata-generate and
#                           bench_decode (before: a segfault in libgomp's first parallel region); a small count runs;
#                           a negative --seed refused with train_gpt's range; bench_decode's --dir, --batches and a
#                           model larger than the machine refused before it measures anything.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DGENERATE=<strata-generate> -DSTRATA_CKPT=<strata-ckpt>
# -DBENCH_DECODE=<bench_decode> -DDAMAGE=<damage_checkpoint> -DWORK=<scratch directory, emptied>.
cmake_minimum_required(VERSION 3.24)
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)

string(REPLACE "|" ";" launch "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(data ${CMAKE_CURRENT_LIST_DIR}/../../data)
set(model ${data}/gpt_gen_init.safetensors)

# no_tokens(<name>): no generated line ("<prompt>: <ids>") in <name>_out.
function(no_tokens name)
  if(${name}_out MATCHES "(^|\n)[0-9]+: [0-9]")
    message(FATAL_ERROR "${name}: tokens were generated:\n${${name}_out}")
  endif()
endfunction()

# import(<dir> <step> <file>): a checkpoint of <file>'s weights at <step> in the new directory <dir>.
function(import dir step file)
  run_checked(import_${step} ok 60 ${STRATA_CKPT} import ${file} ${dir} --step ${step})
endfunction()

if(MODE STREQUAL "settings_differ")
  # One directory with steps 10 and 20 (imported apart, step 20's directory moved beside step 10's), and a second
  # checkpoint of the same shape.
  import(${WORK}/ckpt 10 ${model})
  import(${WORK}/ckpt20 20 ${model})
  file(RENAME ${WORK}/ckpt20/step-00000020 ${WORK}/ckpt/step-00000020)
  import(${WORK}/other 10 ${model})
  set(gen ${GENERATE} --heads 2 --quiet)
  # mpmd(<name> <expect> <rank 0 arguments> <rank 1 arguments>): each a ';'-list of arguments after ${gen}, or of
  # launcher options then ${gen} and its arguments.
  function(mpmd name expect first second)
    foreach(which first second)
      if(NOT ${which} MATCHES "strata-generate")
        set(${which} ${gen} ${${which}})
      endif()
    endforeach()
    run_checked(${name} ${expect} 40 ${launch} -n 1 ${first} : -n 1 ${second})
    set(${name}_out "${${name}_out}" PARENT_SCOPE)
    set(${name}_seconds "${${name}_seconds}" PARENT_SCOPE)
  endfunction()
  # differs(<name> <message> <rank 0 arguments> <rank 1 arguments>): refused within 15 s saying <message>.
  function(differs name text first second)
    mpmd(${name} fail "${first}" "${second}")
    expect_text(${name} "configuration differs across ranks: ${text}")
    no_tokens(${name})
    if(${name}_seconds GREATER 15)
      message(FATAL_ERROR "${name}: refused after ${${name}_seconds} s, not within a few seconds")
    endif()
  endfunction()
  set(at --checkpoint;${WORK}/ckpt;--tokens;1,2,3;--max-new-tokens;8)
  mpmd(same ok "${at};--step;10;--tp;2" "${at};--step;10;--tp;2")
  expect_text(same "0: ")
  differs(step "--step: 10 on rank 0; 20 on rank 1" "${at};--step;10;--tp;2" "${at};--step;20;--tp;2")
  differs(checkpoint "--checkpoint: ${WORK}/ckpt on rank 0; ${WORK}/other on rank 1"
          "${at};--tp;2" "--checkpoint;${WORK}/other;--tokens;1,2,3;--max-new-tokens;8;--tp;2")
  differs(temperature "--temperature: 0 on rank 0; 0.9 on rank 1" "${at};--tp;2" "${at};--tp;2;--temperature;0.9")
  # Data parallel over the prompts: different lists would label a line with another's prompt and drop one.
  set(base --checkpoint;${WORK}/ckpt;--max-new-tokens;8)
  differs(tokens "--tokens: 1,2,3 4,5 on rank 0; 1,2,3 6,7 on rank 1"
          "${base};--tokens;1,2,3;--tokens;4,5" "${base};--tokens;1,2,3;--tokens;6,7")
  # Settings that change the number of collectives (before: a wait until STRATA_TIMEOUT_S).
  set(tok --checkpoint;${WORK}/ckpt;--tokens;1,2,3;--tp;2)
  differs(max_new_tokens "--max-new-tokens: 8 on rank 0; 9 on rank 1"
          "${tok};--max-new-tokens;8" "${tok};--max-new-tokens;9")
  differs(tp "--tp: 2 on rank 0; 1 on rank 1" "${at};--tp;2" "${at};--tp;1")
  # The same flags resolving to different weights: a relative --checkpoint whose latest step is 10 in rank 0's working
  # directory and 20 in rank 1's (as a run committing while the ranks start would leave it).
  file(MAKE_DIRECTORY ${WORK}/a)
  file(RENAME ${WORK}/other ${WORK}/a/ckpt)
  import(${WORK}/b/ckpt 20 ${model})
  set(rel --checkpoint;ckpt;--tokens;1,2,3;--max-new-tokens;8;--tp;2)
  differs(latest "the weights read: ckpt/step-00000010 on rank 0; ckpt/step-00000020 on rank 1"
          "-wdir;${WORK}/a;${gen};${rel}" "-wdir;${WORK}/b;${gen};${rel}")
elseif(MODE STREQUAL "nonfinite")
  include(${CMAKE_CURRENT_LIST_DIR}/../../support/safetensors_poke.cmake)
  file(COPY_FILE ${model} ${WORK}/nan.safetensors)
  safetensors_put_f32(${WORK}/nan.safetensors h.0.mlp.c_fc.weight 5 "\\377\\377\\377\\377")  # a NaN
  file(COPY_FILE ${model} ${WORK}/inf.safetensors)
  safetensors_put_f32(${WORK}/inf.safetensors ln_f.weight 3 "\\000\\000\\200\\177")  # +inf, little-endian 0x7f800000
  # strata-ckpt import refuses them (values_runs.cmake, MODE tooling): the checkpoints are imported clean and damaged
  # behind valid checksums.
  import(${WORK}/nan_ckpt 0 ${model})
  run_checked(damage_nan ok 20 ${DAMAGE} ${WORK}/nan_ckpt/step-00000000 value params/h.0.mlp.c_fc.weight nan 5)
  import(${WORK}/inf_ckpt 0 ${model})
  run_checked(damage_inf ok 20 ${DAMAGE} ${WORK}/inf_ckpt/step-00000000 value params/ln_f.weight inf 3)
  set(nan "tensor 'h.0.mlp.c_fc.weight' holds NaN at element 5")
  set(inf "tensor 'ln_f.weight' holds inf at element 3")
  set(streamed --resident-layers;0;--weights-from;disk)
  set(i 0)
  # <np>|<source>|<what it must say>|<more flags, ',' for ';'>
  foreach(row "1|--weights,${WORK}/nan.safetensors|${WORK}/nan.safetensors: ${nan}|"
              "1|--weights,${WORK}/nan.safetensors|${WORK}/nan.safetensors: ${nan}|${streamed}"
              "1|--weights,${WORK}/inf.safetensors|${WORK}/inf.safetensors: ${inf}|"
              "2|--weights,${WORK}/inf.safetensors|${WORK}/inf.safetensors: ${inf}|--tp,2,--resident-layers,0,--weights-from,disk"
              "1|--checkpoint,${WORK}/nan_ckpt|${WORK}/nan_ckpt/step-00000000: ${nan}|"
              "2|--checkpoint,${WORK}/nan_ckpt|${WORK}/nan_ckpt/step-00000000: ${nan}|--tp,2,${streamed}"
              "2|--checkpoint,${WORK}/inf_ckpt|${WORK}/inf_ckpt/step-00000000: ${inf}|--shard-weights,--weights-from,disk")
    string(REPLACE ";" "," row "${row}")
    unpack_row("${row}" np source text more)
    string(REPLACE "," ";" source "${source}")
    math(EXPR i "${i} + 1")
    run_checked(case${i} fail 60 ${launch} -n ${np} ${GENERATE} ${source} --heads 2 --tokens 1,2,3
                --max-new-tokens 8 ${more})
    expect_text(case${i} "${text}")
    no_tokens(case${i})
  endforeach()
  # The same file with its value restored generates.
  run_checked(finite ok 60 ${launch} -n 1 ${GENERATE} --weights ${model} --heads 2 --tokens 1,2,3 --max-new-tokens 8)
  expect_text(finite "0: ")
elseif(MODE STREQUAL "threads")
  set(range "--threads: must be an integer from 1 to [0-9]+, got")
  set(small --weights ${model} --heads 2 --tokens 1,2,3 --max-new-tokens 4 --quiet)
  set(bench --layers 1 --heads 2 --embd 32 --vocab 64 --ctx 64 --prompt 4 --steps 2 --stream-steps 2 --batches 1
      --reps 1 --placements resident)
  foreach(n 100000 2147483647 0)
    run_checked(generate_${n} fail 60 ${launch} -n 1 ${GENERATE} ${small} --threads ${n})
    run_checked(bench_${n} fail 60 ${BENCH_DECODE} ${bench} --threads ${n})
    foreach(name generate_${n} bench_${n})
      if(NOT ${name}_out MATCHES "${range} ${n}")
        message(FATAL_ERROR "${name}: no '${range} ${n}':\n${${name}_out}")
      endif()
    endforeach()
    no_tokens(generate_${n})
  endforeach()
  # bench_decode refuses what it cannot do before seconds of bandwidth measurement (before: after them).
  run_checked(bench_no_dir fail 60 ${BENCH_DECODE} ${bench} --placements disk --dir ${WORK}/no_such_dir)
  expect_text(bench_no_dir "--dir: Directory does not exist: ${WORK}/no_such_dir")
  run_checked(bench_batch_zero fail 60 ${BENCH_DECODE} ${bench} --batches 1,0)
  expect_text(bench_batch_zero "--batches: must be an integer from 1 to 2147483647, got 0")
  run_checked(bench_too_big fail 60 ${BENCH_DECODE} --layers 100000 --heads 1 --embd 65536 --vocab 64 --ctx 64
              --prompt 4 --steps 2 --batches 1 --placements resident)
  expect_text(bench_too_big "bench_decode: two 2.0 GiB" "of f32 weights" "is more than this machine's memory")
  foreach(name bench_no_dir bench_batch_zero bench_too_big)
    if(${name}_seconds GREATER 3)
      message(FATAL_ERROR "${name}: refused after ${${name}_seconds} s, not before measuring")
    endif()
  endforeach()
  run_checked(generate_two ok 60 ${launch} -n 1 ${GENERATE} ${small} --threads 2)
  expect_text(generate_two "0: ")
  # A negative seed is refused with the range train_gpt's --seed gives (issue 52: it was accepted, wrapped around).
  run_checked(generate_seed fail 60 ${launch} -n 1 ${GENERATE} ${small} --seed -1)
  expect_text(generate_seed "--seed: must be an integer from 0 to 18446744073709551615, got -1")
  no_tokens(generate_seed)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
