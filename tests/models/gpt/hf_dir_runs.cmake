# Hugging Face model directories written by transformers' save_pretrained (tests/data/hf, make_hf_fixtures.py: sharded,
# with model.safetensors.index.json) as the start of a run (cmake -P):
# - strata-generate --weights DIR, the family and shape from config.json: GPT-2 gives PyTorch's greedy tokens
#   (gpt_gen_ref.json; the directory holds gpt_gen_init.safetensors' weights), the Llama family transformers' own
#   (llama_tiny_ref.json), at one rank and at tp 2;
# - train_gpt --init DIR trains exactly as --init of the one-file weights with the shape given by flags: the same
#   losses and weights bit for bit at np 1, np 2 (ZeRO 3), tp 2 and pp 2;
# - strata-ckpt import takes the directory;
# - strata-plan --config: the exact parameter counts of GPT-2 124M and Llama 2 70B from their published config.json;
# - a directory missing a shard is refused naming the index, the shard and a tensor, with no token generated.
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

# json_ids(<out> <file> <key>): the JSON array <key> of <file> as "a,b,c".
function(json_ids out file key)
  file(READ ${file} ref)
  string(JSON n LENGTH "${ref}" ${key})
  math(EXPR last "${n} - 1")
  set(ids)
  foreach(i RANGE ${last})
    string(JSON t GET "${ref}" ${key} ${i})
    list(APPEND ids ${t})
  endforeach()
  list(JOIN ids "," ids)
  set(${out} ${ids} PARENT_SCOPE)
endfunction()

foreach(model "gpt2|${gpt2}|${DATA}/gpt_gen_ref.json" "llama|${llama}|${DATA}/hf/llama_tiny_ref.json")
  string(REPLACE "|" ";" model "${model}")
  list(GET model 0 name)
  list(GET model 1 dir)
  list(GET model 2 ref)
  json_ids(prompt ${ref} prompt)
  json_ids(want ${ref} tokens)
  string(REPLACE "," ";" n "${want}")
  list(LENGTH n n)
  foreach(np 1 2)
    run_checked(generate_${name}_tp${np} ok 120 ${launch} -n ${np} ${bin}/strata-generate --weights ${dir} --tp ${np}
                --tokens ${prompt} --max-new-tokens ${n} --quiet)
    if(NOT generate_${name}_tp${np}_out MATCHES "(^|\n)0: ${want}\n")
      message(FATAL_ERROR "generate_${name}_tp${np}: not the reference's tokens 0: ${want}:\n"
                          "${generate_${name}_tp${np}_out}")
    endif()
  endforeach()
endforeach()
message(STATUS "strata-generate on both sharded directories: the references' greedy tokens at tp 1 and 2")

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

run_checked(plan_gpt2 ok 30 ${bin}/strata-plan --config ${DATA}/hf/configs/gpt2)
expect_text(plan_gpt2 "model: 124,439,808 parameters (0.12B), 12 layers, hidden 768, 12 heads, seq 1024")
run_checked(plan_llama70 fail 30 ${bin}/strata-plan --config ${DATA}/hf/configs/llama2-70b/config.json)
expect_text(plan_llama70 "model: 68,976,648,192 parameters (68.98B), 80 layers, hidden 8192, 64 heads (8 key-value)")

run_checked(import_dir ok 30 ${bin}/strata-ckpt import ${gpt2} ${WORK}/imported)
expect_text(import_dir "GPT-2 L=2 C=32 V=64 ctx=80" "28 tensors, 120320 bytes")

# Out again: strata-ckpt export --hf of a checkpoint of each family (GPT-2 imported from the directory, the Llama
# trained one step at learning rate 0 from it), in shards of at most 40 KB. The exported directories generate the
# same tokens, train as the originals do bit for bit, and (where a Python with transformers is given as HF_PYTHON)
# load in transformers with every tensor bitwise equal and the same logits.
run_checked(export_gpt2 ok 30 ${bin}/strata-ckpt export --hf ${WORK}/imported ${WORK}/gpt2_out --heads 2
            --max-shard-size 40KB)
expect_text(export_gpt2 "4 shard(s), 120320 bytes of F32 tensors, config.json")
run_checked(lr0 ok 60 ${launch} -n 2 ${TRAIN_GPT} --init ${llama} --steps 1 --lr 0 --seq 16 --batch 2 --no-progress
            --checkpoint-dir ${WORK}/llama_ckpt)
run_checked(export_llama ok 30 ${bin}/strata-ckpt export --hf ${WORK}/llama_ckpt ${WORK}/llama_out --max-shard-size 40KB)
expect_text(export_llama "3 shard(s), 90752 bytes of F32 tensors, config.json")
foreach(model "gpt2|${gpt2}|${DATA}/gpt_gen_ref.json" "llama|${llama}|${DATA}/hf/llama_tiny_ref.json")
  string(REPLACE "|" ";" model "${model}")
  list(GET model 0 name)
  list(GET model 2 ref)
  json_ids(prompt ${ref} prompt)
  json_ids(want ${ref} tokens)
  string(REPLACE "," ";" n "${want}")
  list(LENGTH n n)
  run_checked(generate_${name}_out ok 120 ${launch} -n 2 ${bin}/strata-generate --weights ${WORK}/${name}_out --tp 2
              --tokens ${prompt} --max-new-tokens ${n} --quiet)
  if(NOT generate_${name}_out_out MATCHES "(^|\n)0: ${want}\n")
    message(FATAL_ERROR "generate_${name}_out: not the reference's tokens 0: ${want}:\n${generate_${name}_out_out}")
  endif()
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
              ${WORK}/gpt2_out ${llama} ${WORK}/llama_out)
  expect_text(transformers "gpt2_out: 29 tensors bitwise equal" "llama_out: 21 tensors bitwise equal")
else()
  message(STATUS "transformers round trip: skipped (no HF_PYTHON: a Python with torch and transformers)")
endif()

file(COPY ${gpt2}/ DESTINATION ${WORK}/no_shard)
file(REMOVE ${WORK}/no_shard/model-00002-of-00004.safetensors)
run_checked(no_shard fail 60 ${launch} -n 1 ${bin}/strata-generate --weights ${WORK}/no_shard --tokens 1,2,3)
expect_text(no_shard "no_shard/model.safetensors.index.json' maps tensor" "to shard '${WORK}/no_shard/model-00002-of-00004.safetensors', which does not exist")
if(no_shard_out MATCHES "(^|\n)0: [0-9]")
  message(FATAL_ERROR "no_shard: tokens were generated")
endif()
