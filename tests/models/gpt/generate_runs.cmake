# strata-generate end to end (cmake -P): a byte-level model trained at tp 2 x dp 2 with ZeRO-3 and checkpointed at its
# last step generates the same tokens from the checkpoint (read at its saved layout) as from the safetensors file of
# its final weights (train_gpt --save), greedy and sampled; weight placements (blocks streamed from host memory or
# disk, a device budget) give the same text; prompts shared out over 1, 2 and 4 ranks, and tensor-parallel groups of
# 2 and 4, give the same lines; PyTorch's 64 greedy tokens on its own init weights come out at one rank and at tp 2;
# a Llama-style model's 64 from a Hugging Face file and from a checkpoint of a --family llama run; then bad input: a
# token outside the vocabulary, a prompt
# that fills the context, text for a model that is not byte-level, two weight sources, and a checkpoint chunk damaged
# on disk, each a clear error (a non-zero exit naming the problem, no generated tokens).
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DGENERATE=<strata-generate>
# -DWORK=<scratch directory, emptied>.

include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
string(REPEAT "the strata runtime shards parameters, gradients and optimizer state. " 20 text)
file(WRITE "${WORK}/text.txt" "${text}")
set(common --steps 12 --no-progress --text ${WORK}/text.txt --layers 2 --heads 4 --embd 64 --seq 32 --ctx 64
    --batch 4 --lr 3e-3)
train_saved(trained 4 --tp 2 --zero-stage 3 --checkpoint-dir ${WORK}/ckpt --checkpoint-every 12)

string(REPLACE "|" ";" launch "${MPIEXEC}")
set(gen ${launch} -n 1 ${GENERATE})
# same_lines(<name> <want> <np> <strata-generate arguments...>): strata-generate at <np> ranks prints exactly the
# "<prompt>: <ids>" lines <want> (a list, as REGEX MATCHALL gives them).
function(same_lines name want np)
  run_checked(${name} ok 60 ${launch} -n ${np} ${GENERATE} ${ARGN})
  string(REGEX MATCHALL "(^|\n)[0-9]+: [0-9,]+" lines "${${name}_out}")
  if(NOT "${lines}" STREQUAL "${want}")
    message(FATAL_ERROR "${name}: printed '${lines}', expected '${want}'")
  endif()
endfunction()
foreach(mode greedy sampled)
  set(how --max-new-tokens 24 --quiet)
  if(mode STREQUAL "sampled")
    list(APPEND how --temperature 0.9 --top-k 20 --top-p 0.95 --seed 5)
  endif()
  run_checked(${mode}_ckpt ok 60 ${gen} --checkpoint ${WORK}/ckpt --prompt "the strata " ${how})
  run_checked(${mode}_file ok 60 ${gen} --weights ${WORK}/trained.safetensors --heads 4 --prompt "the strata " ${how})
  string(REGEX MATCH "the strata [^\n]*" a "${${mode}_ckpt_out}")
  string(REGEX MATCH "the strata [^\n]*" b "${${mode}_file_out}")
  string(LENGTH "${a}" len)
  if(NOT a STREQUAL b OR len LESS 30)
    message(FATAL_ERROR "${mode}: the checkpoint gave '${a}', the safetensors file '${b}'")
  endif()
  message(STATUS "${mode}: '${a}' from both")
  set(${mode}_text "${a}")
endforeach()

# Weight placements: blocks streamed from host memory, from the checkpoint's files every pass, and as a device budget
# allows (room for one streamed block's slot, not a resident one), each the resident run's text.
set(budget --device-memory 1100000 --prefetch 0 --weights-from disk)
foreach(placement "--resident-layers;0" "--resident-layers;1;--weights-from;disk;--prefetch;0" "${budget}")
  string(REGEX REPLACE "[^a-z0-9]+" "_" tag "${placement}")
  run_checked(placed${tag} ok 60 ${gen} --checkpoint ${WORK}/ckpt --prompt "the strata " --max-new-tokens 24
              ${placement})
  string(REGEX MATCH "the strata [^\n]*" got "${placed${tag}_out}")
  if(NOT got STREQUAL greedy_text)
    message(FATAL_ERROR "${placement}: '${got}', resident '${greedy_text}'")
  endif()
  # One upload stream copies (disk: one slot, one reader): the compute leaves it a core.
  expect_text(placed${tag} "streamed into the device per generated token: " ", 1 more copying the streamed blocks in")
endforeach()
expect_text(placed${tag} "weights: 0 of 2 blocks resident, 2 streamed from ${WORK}/ckpt/step-00000012 (prefetch 0")
message(STATUS "placements: the resident text streamed from host memory, from disk, and under a device budget")

# Token ids: a batch of two prompts, and the timing lines.
run_checked(ids ok 60 ${gen} --checkpoint ${WORK}/ckpt --tokens 116,104,101 --tokens 115 --max-new-tokens 5)
expect_text(ids "0: " "1: " "prefill: " "decode: " "tokens/s" "bytes of weights")
if(ids_out MATCHES "more copying")
  message(FATAL_ERROR "ids: every block resident, yet threads were left to copies: ${ids_out}")
endif()

# Data parallel over requests: three sampled prompts on 1, 2 and 4 ranks (two ranks of four get one, the others
# none) print the same lines, in prompt order.
set(three --checkpoint ${WORK}/ckpt --tokens 116,104,101 --tokens 115 --tokens 97,98 --max-new-tokens 10
    --temperature 0.9 --top-k 20 --seed 7 --quiet)
run_checked(requests_np1 ok 60 ${gen} ${three})
string(REGEX MATCHALL "(^|\n)[0-2]: [0-9,]+" lines_np1 "${requests_np1_out}")
list(LENGTH lines_np1 count)
if(NOT count EQUAL 3)
  message(FATAL_ERROR "np 1 printed '${lines_np1}', not three lines")
endif()
foreach(np 2 4)
  same_lines(requests_np${np} "${lines_np1}" ${np} ${three})
endforeach()
message(STATUS "requests: the same three lines at np 1, 2 and 4")
# Weights sharded over the ranks that share out the prompts (ZeRO-Inference), every block gathered each pass: from
# host memory over 4 ranks (the fourth has no prompt and idles in step), and kept in device memory over the two tp 2
# groups.
foreach(run "4;--shard-weights" "4;--tp;2;--shard-weights;--weights-from;device")
  list(POP_FRONT run np)
  string(REGEX REPLACE "[^a-z0-9]+" "_" tag "${run}")
  same_lines(requests_np${np}${tag} "${lines_np1}" ${np} ${three} ${run})
endforeach()
message(STATUS "requests: the same three lines with the weights sharded over 4 ranks, and over 2 tp groups")

# Tensor parallel: three greedy prompts at tp 2 (one group, then two sharing the prompts), tp 4, and tp 2 with every
# block streamed from the checkpoint's files print the lines one rank prints; so does the KV cache in host memory, on
# one rank and at tp 2 with every block streamed from disk.
set(greedy3 --checkpoint ${WORK}/ckpt --tokens 116,104,101 --tokens 115 --tokens 97,98 --max-new-tokens 10 --quiet)
run_checked(greedy_np1 ok 60 ${gen} ${greedy3})
string(REGEX MATCHALL "(^|\n)[0-2]: [0-9,]+" greedy_lines "${greedy_np1_out}")
foreach(run "2;--tp;2" "4;--tp;2" "4;--tp;4" "2;--tp;2;--resident-layers;0;--weights-from;disk" "1;--kv-in;host"
        "2;--tp;2;--kv-in;host;--resident-layers;0;--weights-from;disk")
  list(POP_FRONT run np)
  string(REGEX REPLACE "[^a-z0-9]+" "_" tag "${run}")
  same_lines(tp_np${np}${tag} "${greedy_lines}" ${np} ${greedy3} ${run})
endforeach()
message(STATUS "tp: the same three greedy lines at tp 2 (np 2 and 4), tp 4, tp 2 streamed from disk, and with the KV "
               "cache in host memory")

# PyTorch's greedy generation (tests/data/gpt_gen_ref.json, by full forwards on gpt_gen_init.safetensors): the same 64
# tokens from strata-generate on that file, at one rank, at tp 2, and at tp 2 with every block streamed from the file.
set(data ${CMAKE_CURRENT_LIST_DIR}/../../data)
file(READ ${data}/gpt_gen_ref.json ref)
json_ids(want ${data}/gpt_gen_ref.json tokens)
json_ids(prompt ${data}/gpt_gen_ref.json prompt)
string(JSON n LENGTH "${ref}" tokens)
set(pytorch --weights ${data}/gpt_gen_init.safetensors --heads 2 --tokens ${prompt} --max-new-tokens ${n} --quiet)
foreach(run "1" "2;--tp;2" "2;--tp;2;--resident-layers;0;--weights-from;disk")
  list(POP_FRONT run np)
  string(REGEX REPLACE "[^a-z0-9]+" "_" tag "${run}")
  same_lines(pytorch_np${np}${tag} "0: ${want}" ${np} ${pytorch} ${run})
endforeach()
message(STATUS "PyTorch's ${n} greedy tokens at one rank, tp 2, and tp 2 streamed from disk")

function(refused name text)
  run_checked(${name} fail 60 ${gen} ${ARGN})
  expect_text(${name} "${text}")
  if(${name}_out MATCHES "(^|\n)[0-9]+: [0-9]")
    message(FATAL_ERROR "${name}: tokens were generated before the error:\n${${name}_out}")
  endif()
endfunction()
refused(token_outside_vocab "token 300 at position 1 is outside the vocabulary [0, 256)"
        --checkpoint ${WORK}/ckpt --tokens 1,300)
# At two ranks too, though the bad prompt is rank 1's: every rank checks every prompt first.
run_checked(token_outside_vocab_np2 fail 60 ${launch} -n 2 ${GENERATE} --checkpoint ${WORK}/ckpt --tokens 1
            --tokens 1,300)
expect_text(token_outside_vocab_np2 "prompt 1: token 300 at position 1 is outside the vocabulary [0, 256)")
string(REPEAT "x" 64 long)
refused(prompt_fills_context "prompt 0 holds 64 tokens: the model's context of 64 leaves no room to generate"
        --checkpoint ${WORK}/ckpt --prompt ${long})
refused(two_sources "give one of --checkpoint DIR and --weights FILE"
        --checkpoint ${WORK}/ckpt --weights ${WORK}/trained.safetensors --prompt "a")
refused(budget_too_small "the least, every block streamed with --prefetch 0, is"
        --checkpoint ${WORK}/ckpt --prompt "a" --device-memory 1K)
refused(heads_not_dividing "--embd 64 must be a positive multiple of --heads 5"
        --weights ${WORK}/trained.safetensors --heads 5 --prompt "a")
refused(shard_without_ranks "--shard-weights shares the streamed blocks among the data-parallel ranks: it needs more"
        --checkpoint ${WORK}/ckpt --prompt "a" --shard-weights)

# The Llama-style family (tests/data/llama_gen_ref.json: PyTorch's greedy generation by full forwards on
# llama_gen_init.safetensors, Hugging Face's names, 4 heads on 2 key-value heads, an untied head): the same tokens from
# that file (its names recognized, the rest of the shape from its tensors), streamed from it, and from a checkpoint of
# train_gpt --family llama started from it (--steps 0: the trainer state records the shape), resident, streamed from
# its files with the KV cache in host memory, sharded over two ranks, and at tp 2; then a family that contradicts the record, a
# file without a context, and a shape flag the file contradicts, refused.
file(READ ${data}/llama_gen_ref.json ref)
json_ids(want ${data}/llama_gen_ref.json tokens)
json_ids(prompt ${data}/llama_gen_ref.json prompt)
string(JSON n LENGTH "${ref}" tokens)
set(hf --weights ${data}/llama_gen_init.safetensors --heads 4 --ctx 80)
run_checked(llama_ckpt ok 120 ${launch} -n 1 ${TRAIN_GPT} --family llama --layers 2 --heads 4 --kv-heads 2 --head-dim 8
            --embd 32 --ffn 64 --vocab 64 --ctx 80 --untied --init ${data}/llama_gen_init.safetensors --seq 16
            --batch 2 --steps 0 --no-progress --checkpoint-dir ${WORK}/llama_ckpt)
set(i 0)
foreach(run "1;${hf}" "1;${hf};--resident-layers;0;--weights-from;disk" "1;--checkpoint;${WORK}/llama_ckpt"
        "1;--checkpoint;${WORK}/llama_ckpt;--resident-layers;0;--weights-from;disk;--kv-in;host"
        "2;--checkpoint;${WORK}/llama_ckpt;--shard-weights" "2;--checkpoint;${WORK}/llama_ckpt;--tp;2")
  list(POP_FRONT run np)
  math(EXPR i "${i} + 1")
  same_lines(llama_${i} "0: ${want}" ${np} --tokens ${prompt} --max-new-tokens ${n} --quiet ${run})
endforeach()
message(STATUS "Llama: PyTorch's ${n} greedy tokens from the Hugging Face file and from a checkpoint, resident, "
               "streamed, sharded and at tp 2")
refused(llama_family_contradicted "--family gpt2: the checkpoint ${WORK}/llama_ckpt/step-00000000 records a llama"
        --checkpoint ${WORK}/llama_ckpt --family gpt2 --tokens 1)
refused(llama_without_ctx "give --heads and --ctx" --weights ${data}/llama_gen_init.safetensors --heads 4 --tokens 1)
refused(llama_shape_contradicted "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 32]" ${hf}
        --kv-heads 4 --tokens 1)

# A byte flipped in the middle of a data file of the checkpoint: its checksum fails, named.
set(victim ${WORK}/ckpt/step-00000012/rank-00001.bin)
flip_middle_byte(${victim} rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not damage ${victim}")
endif()
refused(damaged_chunk "${victim} is corrupt: tensor '" --checkpoint ${WORK}/ckpt --prompt "the strata ")
# The same with every block streamed from the files (the damaged tensor read as its turn comes), at two ranks: both
# stop, naming it.
run_checked(damaged_chunk_streamed_np2 fail 60 ${launch} -n 2 ${GENERATE} --checkpoint ${WORK}/ckpt --tokens 116,104
            --tokens 97 --resident-layers 0 --weights-from disk)
expect_text(damaged_chunk_streamed_np2 "${victim} is corrupt: tensor '")
# And with the blocks sharded over the two ranks, each reading its part from the files: the rank whose part holds the
# damaged bytes names them, and both stop.
run_checked(damaged_chunk_sharded_np2 fail 60 ${launch} -n 2 ${GENERATE} --checkpoint ${WORK}/ckpt --tokens 116,104
            --tokens 97 --shard-weights --weights-from disk)
expect_text(damaged_chunk_sharded_np2 "${victim} is corrupt: tensor '")

# Text through a tokenizer (--tokenizer, runtime/data): a model of 608 ids (steps 0, the spec's init) and the small
# GPT-2-style tokenizer.json of tests/data/tokenizers (601 ids) print the prompt's text and the generated tokens as text;
# a tokenizer with more ids than the model has is refused naming both.
run_checked(tok_model ok 120 ${launch} -n 1 ${TRAIN_GPT} --layers 1 --heads 2 --embd 32 --vocab 608 --ctx 64 --seq 16
            --batch 1 --steps 0 --no-progress --save ${WORK}/tok.safetensors)
set(sentence "Hello world! The quick brown fox jumps over the lazy dog.")
run_checked(tok_text ok 60 ${gen} --weights ${WORK}/tok.safetensors --heads 2
            --tokenizer ${data}/tokenizers/gpt2_tokenizer.json --prompt "${sentence}" --max-new-tokens 6 --quiet)
string(FIND "${tok_text_out}" "${sentence}" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "tok_text: no line with the prompt's text:\n${tok_text_out}")
endif()
refused(tok_too_many_ids "its 601 ids do not fit the model's vocabulary of 256" --checkpoint ${WORK}/ckpt
        --tokenizer ${data}/tokenizers/gpt2_tokenizer.json --prompt "a")
