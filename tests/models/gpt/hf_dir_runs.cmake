# Hugging Face model directories written by transformers' save_pretrained (tests/data/hf, make_hf_fixtures.py: sharded,
# with model.safetensors.index.json) as the start of a run (cmake -P):
# - strata-generate --weights DIR, the family and shape from config.json: GPT-2 gives PyTorch's greedy tokens
#   (gpt_gen_ref.json; the directory holds gpt_gen_init.safetensors' weights), the Llama family transformers' own
#   (llama_tiny_ref.json), at one rank and at tp 2;
# - train_gpt --init DIR trains exactly as --init of the one-file weights with the shape given by flags: the same
#   losses and weights bit for bit at np 1, np 2 (ZeRO 3), tp 2 and pp 2;
# - strata-ckpt import takes the directory;
# - strata-plan --config: the exact parameter counts of GPT-2 124M and Llama 2 70B from their published config.json;
# - each rank reads only the bytes of what it holds (ZeRO 3 and tp 2 at np 2, counted by the reader);
# - a directory missing a shard is refused naming the index, the shard and a tensor, with no token generated; a
#   config.json whose vocabulary the weights disagree with, or of another architecture, is refused naming the file.
# - train_gpt --save-hf writes the run's final weights as a directory (sharded; the tokenizer copied through);
# - strata-ckpt export --hf writes both families back: the same tokens, the same training, and transformers reads them
#   bitwise (with HF_PYTHON);
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DCOMPARE=<compare_runs>
# -DWORK=<scratch directory, emptied> -DDATA=<tests/data> [-DHF_PYTHON=<python with torch and transformers>].
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)
string(REPLACE "|" ";" launch "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
get_filename_component(bin ${TRAIN_GPT} DIRECTORY)
set(gpt2 ${DATA}/hf/gpt2_tiny)
set(llama ${DATA}/hf/llama_tiny)

# generates_reference(<name> <weights> <reference json> <np>): strata-generate --weights <weights> at tp <np> prints the
# reference's greedy tokens for its prompt.
function(generates_reference name weights ref np)
  json_ids(prompt ${ref} prompt)
  json_ids(want ${ref} tokens)
  string(REPLACE "," ";" n "${want}")
  list(LENGTH n n)
  run_checked(${name} ok 120 ${launch} -n ${np} ${bin}/strata-generate --weights ${weights} --tp ${np}
              --tokens ${prompt} --max-new-tokens ${n} --quiet)
  if(NOT ${name}_out MATCHES "(^|\n)0: ${want}\n")
    message(FATAL_ERROR "${name}: not the reference's tokens 0: ${want}:\n${${name}_out}")
  endif()
endfunction()

foreach(model "gpt2|${gpt2}|${DATA}/gpt_gen_ref.json" "llama|${llama}|${DATA}/hf/llama_tiny_ref.json"
              "gpt2_bf16|${DATA}/hf/gpt2_tiny_bf16|${DATA}/hf/gpt2_tiny_bf16_ref.json")
  unpack_row("${model}" name dir ref)
  foreach(np 1 2)
    generates_reference(generate_${name}_tp${np} ${dir} ${ref} ${np})
  endforeach()
endforeach()
message(STATUS "strata-generate on the sharded directories (GPT-2 in F32 and BF16, the Llama): the references' "
               "greedy tokens at tp 1 and 2")

set(common --steps 3 --no-progress --seq 16 --batch 4 --tokens 8192)
set(failed)
foreach(layout "np1|1|--zero-stage,3" "zero3_np2|2|--zero-stage,3" "tp2|2|--tp,2" "pp2|2|--pp,2,--microbatches,2")
  unpack_row("${layout}" name np flags)
  train_saved(file_${name} ${np} --init ${DATA}/gpt_gen_init.safetensors --layers 2 --heads 2 --embd 32 --vocab 64
              --ctx 80 ${flags})
  train_saved(dir_${name} ${np} --init ${gpt2} ${flags})
  compare_to(dir_${name} file_${name} 0 0 0)
endforeach()
if(failed)
  message(FATAL_ERROR "train_gpt --init of the directory differs from --init of the file: ${failed}")
endif()

# Each rank reads from the directory only what its shards hold: at ZeRO 3 over 2 ranks the two halves of the model's
# weights (GPT-2 30080, the Llama 22688), at tp 2 each rank's slices (and the replicated norms), 4 bytes (f32) for
# each element it holds. The Llama's [out, in] tensors are read a column's held rows at a time.
foreach(layout "gpt2_zero3|${gpt2}|30080|--zero-stage,3" "gpt2_tp2|${gpt2}|30080|--tp,2"
               "llama_zero3|${llama}|22688|--zero-stage,3" "llama_tp2|${llama}|22688|--tp,2")
  unpack_row("${layout}" name dir total flags)
  string(REPLACE "," ";" flags "${flags}")
  run_checked(bytes_${name} ok 60 ${CMAKE_COMMAND} -E env STRATA_LOG_LEVEL=info ${launch} -n 2 ${TRAIN_GPT}
              --init ${dir} --steps 1 --no-progress --seq 16 ${flags})
  string(CONCAT pattern "bytes read and elements held: ([0-9]+) bytes for ([0-9]+) elements in [0-9.]+ ms "
                        "\\([0-9.]+ ms reading\\), ([0-9]+) bytes for ([0-9]+) elements")
  string(REGEX MATCH "${pattern}" _ "${bytes_${name}_out}")
  if(NOT CMAKE_MATCH_4)
    message(FATAL_ERROR "bytes_${name}: no per-rank count of the bytes read:\n${bytes_${name}_out}")
  endif()
  math(EXPR held "${CMAKE_MATCH_2} + ${CMAKE_MATCH_4}")
  math(EXPR want0 "4 * ${CMAKE_MATCH_2}")
  math(EXPR want1 "4 * ${CMAKE_MATCH_4}")
  message(STATUS "bytes_${name}: ranks read ${CMAKE_MATCH_1} and ${CMAKE_MATCH_3} bytes for ${CMAKE_MATCH_2} and "
                 "${CMAKE_MATCH_4} elements held")
  if(NOT CMAKE_MATCH_1 EQUAL want0 OR NOT CMAKE_MATCH_3 EQUAL want1)
    message(FATAL_ERROR "bytes_${name}: a rank read other than 4 bytes per element it holds")
  endif()
  if(name MATCHES "zero3" AND NOT held EQUAL total)
    message(FATAL_ERROR "bytes_${name}: the ranks hold ${held} elements between them, not the model's ${total} once")
  endif()
  if(name MATCHES "tp2" AND (NOT held GREATER total OR CMAKE_MATCH_2 GREATER_EQUAL total))
    message(FATAL_ERROR "bytes_${name}: ${CMAKE_MATCH_2} and ${CMAKE_MATCH_4} elements: not slices plus replicated "
                        "norms")
  endif()
endforeach()

# A config.json that disagrees with the weights, and one of another architecture: refused naming the file.
file(COPY ${gpt2}/ DESTINATION ${WORK}/wrong_vocab)
file(READ ${gpt2}/config.json config)
string(REPLACE "\"vocab_size\": 64" "\"vocab_size\": 65" wrong "${config}")
file(WRITE ${WORK}/wrong_vocab/config.json "${wrong}")
run_checked(wrong_vocab fail 60 ${launch} -n 1 ${TRAIN_GPT} --init ${WORK}/wrong_vocab --steps 1 --no-progress)
expect_text(wrong_vocab "wte.weight' in ${WORK}/wrong_vocab/model-" "has shape [64, 32], expected [65, 32]")
file(COPY ${gpt2}/ DESTINATION ${WORK}/bert)
string(REPLACE "\"model_type\": \"gpt2\"" "\"model_type\": \"bert\"" bert "${config}")
string(REPLACE "GPT2LMHeadModel" "BertForMaskedLM" bert "${bert}")
file(WRITE ${WORK}/bert/config.json "${bert}")
run_checked(bert fail 60 ${launch} -n 1 ${TRAIN_GPT} --init ${WORK}/bert --steps 1 --no-progress)
expect_text(bert "bert/config.json: .architectures: 'BertForMaskedLM' is not an architecture Strata trains")

run_checked(plan_gpt2 ok 30 ${bin}/strata-plan --config ${DATA}/hf/configs/gpt2)
expect_text(plan_gpt2 "model: 124,439,808 parameters (0.12B), 12 layers, hidden 768, 12 heads, seq 1024")
run_checked(plan_llama70 fail 30 ${bin}/strata-plan --config ${DATA}/hf/configs/llama2-70b/config.json)
expect_text(plan_llama70 "model: 68,976,648,192 parameters (68.98B), 80 layers, hidden 8192, 64 heads (8 key-value)")

run_checked(import_dir ok 30 ${bin}/strata-ckpt import ${gpt2} ${WORK}/imported)
expect_text(import_dir "GPT-2 L=2 C=32 V=64 ctx=80" "28 tensors, 120320 bytes")

# Out again: strata-ckpt export --hf of a checkpoint of each family (GPT-2 imported from the directory, the Llama
# trained one step at learning rate 0 from it, at ZeRO 3 np 2, np 1, tp 2 and pp 2), in shards of at most 40 KB. The exported directories generate the
# same tokens, train as the originals do bit for bit, and (where a Python with transformers is given as HF_PYTHON)
# load in transformers with every tensor bitwise equal and the same logits.
run_checked(export_gpt2 ok 30 ${bin}/strata-ckpt export --hf ${WORK}/imported ${WORK}/gpt2_out --heads 2
            --max-shard-size 40KB)
expect_text(export_gpt2 "4 shard(s), 120320 bytes of F32 tensors, config.json")
# BF16 out and back: the BF16 directory imported and exported as BF16 again is the same files, byte for byte.
run_checked(import_bf16 ok 30 ${bin}/strata-ckpt import ${DATA}/hf/gpt2_tiny_bf16 ${WORK}/imported_bf16)
run_checked(export_bf16 ok 30 ${bin}/strata-ckpt export --hf ${WORK}/imported_bf16 ${WORK}/bf16_out --heads 2
            --dtype bf16 --max-shard-size 40KB)
run_checked(reimport_bf16 ok 30 ${bin}/strata-ckpt import ${WORK}/bf16_out ${WORK}/reimported_bf16)
run_checked(reexport_bf16 ok 30 ${bin}/strata-ckpt export --hf ${WORK}/reimported_bf16 ${WORK}/bf16_again --heads 2
            --dtype bf16 --max-shard-size 40KB)
file(GLOB shards RELATIVE ${WORK}/bf16_out ${WORK}/bf16_out/*)
foreach(f IN LISTS shards)
  file(SHA256 ${WORK}/bf16_out/${f} one)
  file(SHA256 ${WORK}/bf16_again/${f} two)
  if(NOT one STREQUAL two)
    message(FATAL_ERROR "export --hf --dtype bf16: ${f} differs after a BF16 round trip")
  endif()
endforeach()

run_checked(lr0 ok 60 ${launch} -n 2 ${TRAIN_GPT} --init ${llama} --steps 1 --lr 0 --seq 16 --batch 2 --no-progress
            --checkpoint-dir ${WORK}/llama_ckpt)
run_checked(export_llama ok 30 ${bin}/strata-ckpt export --hf ${WORK}/llama_ckpt ${WORK}/llama_out --max-shard-size 40KB)
expect_text(export_llama "3 shard(s), 90752 bytes of F32 tensors, config.json")
# The GPT-2 read from the directory at tp 2 (its c_attn split into q | k | v slices), one step at learning rate 0,
# saved as a checkpoint and exported: transformers reads it bitwise equal to the original (below).
run_checked(lr0_gpt2 ok 60 ${launch} -n 2 ${TRAIN_GPT} --init ${gpt2} --steps 1 --lr 0 --seq 16 --batch 2 --tp 2
            --no-progress --checkpoint-dir ${WORK}/gpt2_tp2_ckpt)
run_checked(export_gpt2_tp2 ok 30 ${bin}/strata-ckpt export --hf ${WORK}/gpt2_tp2_ckpt ${WORK}/gpt2_tp2_out)
# The same from checkpoints the Llama saved at np 1, tp 2 and pp 2 (its boxes cut otherwise): the same directory.
set(layout_outs)
foreach(layout "np1|1|--zero-stage,3" "tp2|2|--tp,2" "pp2|2|--pp,2,--microbatches,2")
  unpack_row("${layout}" name np flags)
  run_checked(lr0_${name} ok 60 ${launch} -n ${np} ${TRAIN_GPT} --init ${llama} --steps 1 --lr 0 --seq 16 --batch 2
              --no-progress --checkpoint-dir ${WORK}/llama_ckpt_${name} ${flags})
  run_checked(export_llama_${name} ok 30 ${bin}/strata-ckpt export --hf ${WORK}/llama_ckpt_${name}
              ${WORK}/llama_out_${name} --max-shard-size 40KB)
  file(GLOB shards RELATIVE ${WORK}/llama_out ${WORK}/llama_out/*.safetensors)
  foreach(f IN LISTS shards)
    file(SHA256 ${WORK}/llama_out/${f} one)
    file(SHA256 ${WORK}/llama_out_${name}/${f} two)
    if(NOT one STREQUAL two)
      message(FATAL_ERROR "export --hf of the checkpoint saved at ${name}: ${f} differs from the ZeRO 3 np 2 one's")
    endif()
  endforeach()
endforeach()
foreach(model "gpt2|${DATA}/gpt_gen_ref.json" "llama|${DATA}/hf/llama_tiny_ref.json")
  unpack_row("${model}" name ref)
  generates_reference(generate_${name}_out ${WORK}/${name}_out ${ref} 2)
endforeach()
set(common --steps 3 --no-progress --seq 16 --batch 4 --tokens 8192 --zero-stage 3)
foreach(name gpt2 llama)
  train_saved(${name}_from_original 2 --init ${${name}})
  train_saved(${name}_from_export 2 --init ${WORK}/${name}_out)
  compare_to(${name}_from_export ${name}_from_original 0 0 0)
endforeach()
if(failed)
  message(FATAL_ERROR "train_gpt --init of the exported directory differs from the original's: ${failed}")
endif()
if(HF_PYTHON)
  run_checked(transformers ok 300 ${HF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_hf_roundtrip.py ${gpt2}
              ${WORK}/gpt2_out ${llama} ${WORK}/llama_out ${gpt2} ${WORK}/gpt2_tp2_out)
  expect_text(transformers "gpt2_out: 29 tensors bitwise equal" "llama_out: 21 tensors bitwise equal"
              "gpt2_tp2_out: 29 tensors bitwise equal")
else()
  message(STATUS "transformers round trip: skipped (no HF_PYTHON: a Python with torch and transformers)")
endif()

# train_gpt --save-hf: the final weights as a new directory (GPT-2 at ZeRO 3 in 40 KB shards, the Llama at tp 2 with
# the tokenizer of its --init directory copied through), written beside --save's file of the same weights: a run
# started from the directory holds exactly those weights (its --save of them at step 0 is the same file, byte for byte).
file(COPY ${llama}/ DESTINATION ${WORK}/llama_tok)
file(COPY_FILE ${DATA}/tokenizers/llama3_tokenizer.json ${WORK}/llama_tok/tokenizer.json)
foreach(run "gpt2|${gpt2}|--zero-stage,3,--save-shard-size,40KB" "llama|${WORK}/llama_tok|--tp,2")
  unpack_row("${run}" name from flags)
  string(REPLACE "," ";" flags "${flags}")
  run_checked(save_hf_${name} ok 120 ${launch} -n 2 ${TRAIN_GPT} --init ${from} --steps 2 --seq 16 --batch 2
              --no-progress ${flags} --save-hf ${WORK}/${name}_saved --save ${WORK}/${name}_saved.safetensors)
  run_checked(reload_${name} ok 60 ${launch} -n 1 ${TRAIN_GPT} --init ${WORK}/${name}_saved --steps 0 --no-progress
              --save ${WORK}/${name}_reloaded.safetensors)
  file(SHA256 ${WORK}/${name}_saved.safetensors saved)
  file(SHA256 ${WORK}/${name}_reloaded.safetensors reloaded)
  if(NOT saved STREQUAL reloaded)
    message(FATAL_ERROR "save_hf_${name}: the directory does not hold the run's final weights (--save's file)")
  endif()
endforeach()
if(NOT EXISTS ${WORK}/gpt2_saved/model.safetensors.index.json OR NOT EXISTS ${WORK}/llama_saved/tokenizer.json)
  message(FATAL_ERROR "--save-hf: no shards for the GPT-2, or no tokenizer.json copied for the Llama")
endif()
run_checked(save_hf_exists fail 60 ${launch} -n 1 ${TRAIN_GPT} --init ${gpt2} --steps 1 --no-progress
            --save-hf ${WORK}/gpt2_saved)
expect_text(save_hf_exists "--save-hf ${WORK}/gpt2_saved exists already")
expect_no_steps_after(save_hf_exists -1)

file(COPY ${gpt2}/ DESTINATION ${WORK}/no_shard)
file(REMOVE ${WORK}/no_shard/model-00002-of-00004.safetensors)
run_checked(no_shard fail 60 ${launch} -n 1 ${bin}/strata-generate --weights ${WORK}/no_shard --tokens 1,2,3)
expect_text(no_shard "no_shard/model.safetensors.index.json' maps tensor" "to shard '${WORK}/no_shard/model-00002-of-00004.safetensors', which does not exist")
if(no_shard_out MATCHES "(^|\n)0: [0-9]")
  message(FATAL_ERROR "no_shard: tokens were generated")
endif()
