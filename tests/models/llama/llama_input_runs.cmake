# How a Llama-style run is given its model (cmake -P): by flags, by `--model llama-tiny`, and by a Hugging Face model
# directory (`--init DIR`: config.json and model.safetensors) train the same 20 steps bit for bit; and bad input is
# refused before any step, naming the field or the value: heads not divisible by the key-value heads, a tp that
# neither divides the key-value heads nor is divided by them, a config.json of another architecture, of a mixture of
# experts, with a sliding window shorter than the sequence or a rope scaling it does not know, and weights whose
# shapes disagree with the config.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DWORK=<scratch directory, emptied>
# -DDATA=<tests/data>.
set(run --steps 20 --no-progress --seq 8 --lr 1e-2 --grad-clip 1.0 --recompute none --data ${DATA}/gpt_tiny_tokens.bin)
set(shape --family llama --layers 2 --embd 32 --heads 4 --kv-heads 2 --ffn 64 --vocab 64 --ctx 16 --untied)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../gpt/gpt_run_checks.cmake)

# run_llama(<name> args...): train_gpt at np 1 (run_checks.cmake's run_checked), its metrics in WORK/<name>.jsonl.
macro(run_llama name)
  run_checked(${name} ok 120 ${launcher} -n 1 ${TRAIN_GPT} ${run} ${ARGN} --metrics ${WORK}/${name}.jsonl)
endmacro()

# The model directory: the reference's init file and its config.json, as transformers writes it (4.x).
set(dir ${WORK}/llama-tiny-hf)
file(MAKE_DIRECTORY ${dir})
file(COPY_FILE ${DATA}/llama_tiny_init.safetensors ${dir}/model.safetensors)
set(config [=[{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0, "rope_scaling": null, "max_position_embeddings": 16, "vocab_size": 64,
  "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false, "hidden_act": "silu",
  "torch_dtype": "float32", "transformers_version": "4.49.0"}]=])
file(WRITE ${dir}/config.json "${config}")

run_llama(flags ${shape} --init ${DATA}/llama_tiny_init.safetensors)
read_metrics(flags ${WORK}/flags.jsonl)
run_llama(preset --model llama-tiny --seq 8 --init ${DATA}/llama_tiny_init.safetensors)
read_metrics(preset ${WORK}/preset.jsonl)
expect_steps(preset flags 0 19 exact)
run_llama(directory --init ${dir})
read_metrics(directory ${WORK}/directory.jsonl)
expect_steps(directory flags 0 19 exact)

# Refusals, each before any step.
refused_layout(kv_heads 1 "num_attention_heads 4 must divide by num_key_value_heads 3" ${run} ${shape} --kv-heads 3)
refused_layout(tp_kv 3 "--tp 3 neither divides the 2 key-value heads nor is divided by them" ${run} ${shape}
               --heads 6 --embd 48 --ffn 96 --tp 3)
refused_layout(shapes 1 "has shape [32, 64], but the config" ${run} ${shape} --ffn 32
               --init ${DATA}/llama_tiny_init.safetensors)
# config.json files that are not a model this family trains: each replaces a piece of the good one and must be
# refused naming what it found.
set(arch "\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\"")
set(neox "\"architectures\": [\"GPTNeoXForCausalLM\"], \"model_type\": \"gpt_neox\"")
set(mistral "\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", \"sliding_window\": 4")
set(cases "other|${arch}|${neox}|GPTNeoXForCausalLM"
          "moe|\"mlp_bias\": false|\"mlp_bias\": false, \"num_local_experts\": 8|num_local_experts"
          "window|${arch}|${mistral}|sliding_window"
          "rope|\"rope_scaling\": null|\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}|yarn")
foreach(case IN LISTS cases)
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 name)
  list(GET parts 1 from)
  list(GET parts 2 to)
  list(GET parts 3 says)
  string(REPLACE "${from}" "${to}" bad "${config}")
  file(MAKE_DIRECTORY ${WORK}/${name})
  file(WRITE ${WORK}/${name}/config.json "${bad}")
  file(COPY_FILE ${DATA}/llama_tiny_init.safetensors ${WORK}/${name}/model.safetensors)
  refused_layout(config_${name} 1 "${says}" ${run} --init ${WORK}/${name})
endforeach()
