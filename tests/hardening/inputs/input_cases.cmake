# Refused inputs through the tools' command lines and environment, one table per MODE. Each case runs one tool and
# expects a non-zero exit with a message matching MATCH (and never CLI11's 309-digit range "1797..."); ACCEPT cases
# expect exit 0. MODE thread_limit_train_gpt compares train_gpt under OMP_THREAD_LIMIT=1 with the same run without it.
#
#   cmake -DMODE=<mode> -DMPIEXEC=<launcher, | for ;> -DTRAIN_GPT=... -DSTRATA_PLAN=... -DCUSTOM_TRAINER=...
#         -DCOLLECTIVES_BENCH=... -DSTRATA_CKPT=... -DBENCH_ADAMW=... -P input_cases.cmake
cmake_minimum_required(VERSION 3.24)
string(REPLACE "|" ";" MPIEXEC "${MPIEXEC}")
set_property(GLOBAL PROPERTY input_case_failures "")
set(ONE_RANK ${MPIEXEC} -n 1)

# refused(NAME <case> [MPI] [ENV VAR=value...] COMMAND <tool> <args...> MATCH <regex>): the tool must exit non-zero
# and print something matching the regex; accepted(...) the same with exit 0. MPI runs it through mpiexec -n 1 (the
# tools that start a Runtime).
function(check_case expect_ok)
  cmake_parse_arguments(C "MPI" "NAME;MATCH" "ENV;COMMAND" ${ARGN})
  set(launch)
  if(C_MPI)
    set(launch ${ONE_RANK})
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${C_ENV} ${launch} ${C_COMMAND}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 120)
  set(problem "")
  if(expect_ok AND NOT rc EQUAL 0)
    set(problem "exit ${rc}, expected 0")
  elseif(NOT expect_ok AND rc EQUAL 0)
    set(problem "exit 0, expected a refusal")
  elseif(NOT expect_ok AND NOT rc MATCHES "^[0-9]+$")
    set(problem "${rc}")  # a timeout or a signal: not a clean refusal
  endif()
  if(C_MATCH AND NOT out MATCHES "${C_MATCH}")
    string(APPEND problem " no match for '${C_MATCH}'")
  endif()
  if(out MATCHES "179769313486")
    string(APPEND problem " CLI11's 309-digit range is back")
  endif()
  string(REPLACE ";" " " shown "${C_ENV} ${C_COMMAND}")
  if(problem STREQUAL "")
    message(STATUS "ok   ${C_NAME}: ${shown}")
  else()
    string(STRIP "${out}" out)
    string(LENGTH "${out}" n)
    if(n GREATER 1500)
      string(SUBSTRING "${out}" 0 1500 out)
    endif()
    message(STATUS "FAIL ${C_NAME}: ${shown}\n     ${problem}\n     output: ${out}")
    set_property(GLOBAL APPEND PROPERTY input_case_failures "${C_NAME}")
  endif()
endfunction()
function(refused)
  check_case(FALSE ${ARGN})
endfunction()
function(accepted)
  check_case(TRUE ${ARGN})
endfunction()

set(TINY --steps 1 --no-progress)  # the default model: a quick run when the inputs are good

if(MODE STREQUAL "flag_messages")
  # Plain words for every range, NaN and infinities refused as not finite, ints that do not fit refused by value.
  refused(NAME eps_zero COMMAND ${TRAIN_GPT} --eps 0 MATCH "--eps: must be a finite number > 0, got 0")
  refused(NAME lr_nan COMMAND ${TRAIN_GPT} --lr nan MATCH "--lr: must be a finite number >= 0, got nan")
  refused(NAME lr_negative COMMAND ${TRAIN_GPT} --lr -1 MATCH "--lr: must be a finite number >= 0, got -1")
  refused(NAME lr_inf COMMAND ${TRAIN_GPT} --lr inf MATCH "--lr: must be a finite number >= 0, got inf")
  refused(NAME grad_clip_nan COMMAND ${TRAIN_GPT} --grad-clip nan MATCH "--grad-clip: must be a finite number >= 0")
  refused(NAME beta2_one COMMAND ${TRAIN_GPT} --beta2 1
          MATCH "--beta2: must be a finite number in \\[0, 1\\), got 1")
  refused(NAME steps_negative COMMAND ${TRAIN_GPT} --steps -1
          MATCH "--steps: must be an integer from 0 to 2147483647, got -1")
  refused(NAME layers_zero COMMAND ${TRAIN_GPT} --layers 0
          MATCH "--layers: must be an integer from 1 to 2147483647, got 0")
  refused(NAME batch_beyond_int COMMAND ${TRAIN_GPT} --batch 3000000000
          MATCH "--batch: must be an integer from 1 to 2147483647, got 3000000000")
  refused(NAME vocab_beyond_int COMMAND ${TRAIN_GPT} --vocab 2147483648
          MATCH "--vocab: must be an integer from 2 to 2147483647, got 2147483648")
  refused(NAME prefetch_range COMMAND ${TRAIN_GPT} --prefetch 9 MATCH "--prefetch: must be an integer from 0 to 8, got 9")
  # The learning-rate schedule: its names, the WSD fraction's range, a floor above the peak, two schedules at once.
  refused(NAME lr_schedule_unknown COMMAND ${TRAIN_GPT} --lr-schedule step MATCH "--lr-schedule: step not in")
  refused(NAME decay_fraction_zero COMMAND ${TRAIN_GPT} --decay-fraction 0
          MATCH "--decay-fraction: must be a finite number in \\(0, 1\\], got 0")
  refused(NAME min_lr_above_lr COMMAND ${TRAIN_GPT} ${TINY} --lr 1e-3 --min-lr 1 --lr-schedule cosine
          MATCH "--min-lr 1 must be in \\[0, --lr 0.001\\]")
  refused(NAME recompute_every_beyond_blocks COMMAND ${TRAIN_GPT} ${TINY} --layers 2 --recompute full
          --recompute-every 5 MATCH "--recompute-every 5 is above the model's 2 blocks: no block would be recomputed")
  refused(NAME cosine_and_linear COMMAND ${TRAIN_GPT} ${TINY} --cosine --lr-schedule linear
          MATCH "--cosine and --lr-schedule linear ask for two schedules")
  refused(NAME trainer_momentum COMMAND ${CUSTOM_TRAINER} --momentum 1.5
          MATCH "--momentum: must be a finite number in \\[0, 1\\], got 1.5")
  refused(NAME trainer_lr_nan COMMAND ${CUSTOM_TRAINER} --lr nan MATCH "--lr: must be a finite number >= 0, got nan")
  refused(NAME trainer_steps_zero COMMAND ${CUSTOM_TRAINER} --steps 0
          MATCH "--steps: must be an integer from 1 to 2147483647, got 0")
  refused(NAME bench_iters_zero COMMAND ${COLLECTIVES_BENCH} -n 0
          MATCH "--iters: must be an integer from 1 to 16777216, got 0")
  refused(NAME ckpt_step_negative COMMAND ${STRATA_CKPT} verify . --step -1 MATCH "--step: must be an integer >= 0, got -1")
  refused(NAME plan_layers_zero COMMAND ${STRATA_PLAN} --layers 0 --hidden 768 --heads 12 --seq 1024
          MATCH "--layers: must be an integer from 1 to 100000, got 0")
  refused(NAME bench_adamw_reps COMMAND ${BENCH_ADAMW} --reps 0
          MATCH "--reps: must be an integer from 1 to 2147483647, got 0")

  # --global-batch: rows that do not split into the layout's micro-batches, or a flag it sets given otherwise.
  refused(NAME global_batch_rows MPI COMMAND ${TRAIN_GPT} --global-batch 10 --batch 4 ${TINY}
          MATCH "--global-batch 10 over 1 data-parallel ranks is 10 rows each, not a whole number of micro-batches of --batch 4")
  refused(NAME global_batch_accum MPI COMMAND ${TRAIN_GPT} --global-batch 8 --batch 4 --grad-accum 3 ${TINY}
          MATCH "--global-batch 8 sets --grad-accum to 2 \\(1 data-parallel ranks x --batch 4\\): drop --grad-accum 3")
  refused(NAME global_batch_pipeline MPI COMMAND ${TRAIN_GPT} --global-batch 8 --microbatches 2 --batch 6 ${TINY}
          MATCH "--global-batch 8 sets --batch to 8 under a pipeline")
  accepted(NAME global_batch_sets_accum MPI COMMAND ${TRAIN_GPT} --global-batch 8 --batch 2 ${TINY}
           MATCH "1 data-parallel ranks x 2 rows x 8 tokens x 4 micro-batches")

  # An empty value is refused, not taken as "none" (--save '' saved nothing) or "full" (--recompute '').
  refused(NAME save_empty COMMAND sh -c "exec \"$0\" --save ''" ${TRAIN_GPT}
          MATCH "--save: is an empty path; give a file name")
  refused(NAME checkpoint_dir_empty COMMAND sh -c "exec \"$0\" --checkpoint-dir ''" ${TRAIN_GPT}
          MATCH "--checkpoint-dir: is an empty path")
  refused(NAME recompute_empty COMMAND sh -c "exec \"$0\" --steps 1 --no-progress --recompute ''" ${TRAIN_GPT}
          MATCH "--recompute '': a block's recomputation is none, mlp")
  accepted(NAME recompute_alone_is_full MPI COMMAND ${TRAIN_GPT} ${TINY} --recompute
           MATCH "\"policy\":\"full\"")
  # strata-plan: --params 0 meant "count from the dimensions"; 1e30 planned; 2e9 layers searched for minutes.
  set(PLAN_GPT2 --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024)
  refused(NAME plan_params_zero COMMAND ${STRATA_PLAN} ${PLAN_GPT2} --params 0
          MATCH "--params: must be a finite number in \\(0, 1000000000000000\\], got 0")
  refused(NAME plan_params_huge COMMAND ${STRATA_PLAN} ${PLAN_GPT2} --params 1e30
          MATCH "--params: must be a finite number in \\(0, 1000000000000000\\], got 1e30")
  refused(NAME plan_layers_huge COMMAND ${STRATA_PLAN} --layers 2000000000 --hidden 768 --heads 12 --seq 1024
          MATCH "--layers: must be an integer from 1 to 100000, got 2000000000")

elseif(MODE STREQUAL "size_overflow")
  # Sizes that wrap around or that no address space holds: named before anything is allocated.
  refused(NAME embd_wraps MPI COMMAND ${TRAIN_GPT} --embd 2000000000 --heads 1 ${TINY}
          MATCH "a block's parameters \\(12 x --embd x --embd / --tp\\) = 12 x 2000000000 x 2000000000 overflows")
  refused(NAME batch_wraps MPI COMMAND ${TRAIN_GPT} --batch 2000000000 ${TINY}
          MATCH "tokens per micro-batch \\(--batch x --seq\\) = 2000000000 x 8 overflows a 32-bit signed integer")
  refused(NAME embd_beyond_address_space MPI COMMAND ${TRAIN_GPT} --embd 1048576 --heads 1 ${TINY}
          MATCH "parameters per rank \\(f32 weights, gradients and AdamW moments\\) would take [0-9]+ bytes.*more than any process can address")
  refused(NAME logits_beyond_address_space MPI
          COMMAND ${TRAIN_GPT} --batch 1048576 --seq 1024 --ctx 1024 --vocab 65536 ${TINY}
          MATCH "the activations of 1048576 rows x 1024 tokens \\(--batch x --seq\\).*more than any process can address")
  refused(NAME tokens_beyond_address_space MPI COMMAND ${TRAIN_GPT} --tokens 100000000000000 ${TINY}
          MATCH "--tokens would take 200000000000000 bytes .*more than any process can address")
  refused(NAME mlp_hidden_wraps MPI COMMAND ${CUSTOM_TRAINER} --layers 5 --hidden 2000000000 --steps 1
          MATCH "the hidden weights \\(--layers x --hidden x --hidden\\) = 5 x 2000000000 x 2000000000 overflows")
  refused(NAME mlp_beyond_address_space MPI COMMAND ${CUSTOM_TRAINER} --hidden 4000000 --steps 1
          MATCH "MLP parameters \\(--hidden 4000000, --layers 3\\) would take .*more than any process can address")
  refused(NAME mlp_rows_wrap MPI COMMAND ${CUSTOM_TRAINER} --steps 2000000000 --grad-accum 2000000000
          MATCH "rows drawn \\(--steps x --grad-accum x --batch\\) = 2000000000 x 2000000000 x 24 overflows")

elseif(MODE STREQUAL "environment")
  # STRATA_* values checked at start-up, naming the variable and what is allowed.
  foreach(bad inf nan 1e300 0)
    refused(NAME timeout_${bad} MPI ENV STRATA_TIMEOUT_S=${bad} COMMAND ${TRAIN_GPT} ${TINY}
            MATCH "STRATA_TIMEOUT_S='${bad}' must be a number of seconds > 0 and <= 1e\\+07")
  endforeach()
  refused(NAME log_level_unknown MPI ENV STRATA_LOG_LEVEL=verbose COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_LOG_LEVEL='verbose': 'verbose' is not a level.*trace, debug, info, warn, error, critical or off")
  refused(NAME log_level_unknown_logger MPI ENV STRATA_LOG_LEVEL=info,com=debug COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "there is no logger 'com'.*core, comm, shard, mem")
  refused(NAME log_ranks_unknown MPI ENV STRATA_LOG_RANKS=first COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_LOG_RANKS='first': 'first' is not a rank.*all, \\* or a comma list of rank numbers")
  refused(NAME device_memory_overflow MPI ENV STRATA_DEVICE_MEMORY=1e30GB COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_DEVICE_MEMORY='1e30GB' is [0-9.e+]+ bytes, more than a 64-bit size can hold")
  refused(NAME device_memory_inf MPI ENV STRATA_DEVICE_MEMORY=inf COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_DEVICE_MEMORY='inf' must be a finite size in bytes")
  refused(NAME device_memory_flag_nan MPI COMMAND ${TRAIN_GPT} --device-memory nanGB ${TINY}
          MATCH "--device-memory='nanGB' must be a finite size in bytes")
  refused(NAME fault_rank_not_a_number MPI ENV STRATA_FAULT=checkpoint-kill:x COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_FAULT='checkpoint-kill:x' must be checkpoint-kill:RANK\\[:NTH\\]")
  accepted(NAME log_spec_per_logger MPI ENV STRATA_LOG_LEVEL=warn,comm=info,gpt=debug STRATA_LOG_RANKS=0
           COMMAND ${TRAIN_GPT} ${TINY} MATCH "final_loss")
  # Values that meant something else, silently: a budget of 0 (no budget), ranks the job does not have (no output,
  # no fault), --recompute auto without the flag while STRATA_DEVICE_MEMORY gives the budget (refused).
  refused(NAME device_memory_zero MPI ENV STRATA_DEVICE_MEMORY=0 COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_DEVICE_MEMORY='0' is a budget of 0 bytes, which nothing fits in; leave it unset for no budget")
  refused(NAME device_memory_flag_zero MPI COMMAND ${TRAIN_GPT} --device-memory 0 ${TINY}
          MATCH "--device-memory='0' is a budget of 0 bytes")
  refused(NAME log_ranks_beyond_job MPI ENV STRATA_LOG_RANKS=0,5 COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_LOG_RANKS='0,5' names rank 5, which this job of 1 rank does not have \\(ranks 0 to 0\\)")
  refused(NAME fault_rank_beyond_job MPI ENV STRATA_FAULT=checkpoint-kill:3 COMMAND ${TRAIN_GPT} ${TINY}
          MATCH "STRATA_FAULT='checkpoint-kill:3' names rank 3, which this job of 1 rank does not have")
  accepted(NAME recompute_auto_env_budget MPI ENV STRATA_DEVICE_MEMORY=64MiB COMMAND ${TRAIN_GPT} ${TINY}
           --recompute auto MATCH "\"final_loss\":[0-9]")
  refused(NAME recompute_auto_no_budget MPI COMMAND ${TRAIN_GPT} ${TINY} --recompute auto
          MATCH "--recompute auto chooses from the device budget: give --device-memory or STRATA_DEVICE_MEMORY")
  # No step: a null loss and a line that says so, not "final_loss": 0.0.
  accepted(NAME steps_zero MPI COMMAND ${TRAIN_GPT} --steps 0 --no-progress
           MATCH "no step ran \\(--steps 0\\): final_loss is null.*\"final_loss\":null")

elseif(MODE STREQUAL "plan_checks")
  # strata-plan refuses what the planner cannot compute or a run would refuse, naming the flags and values.
  set(GPT2 --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024)
  refused(NAME heads_not_dividing_hidden COMMAND ${STRATA_PLAN} ${GPT2} --heads 5
          MATCH "--heads 5 must divide --hidden 768")
  refused(NAME tp_not_dividing_heads COMMAND ${STRATA_PLAN} ${GPT2} --tp 5
          MATCH "--tp 5 must divide --heads 12 and --hidden 768")
  refused(NAME sequence_parallel_seq COMMAND ${STRATA_PLAN} ${GPT2} --tp 2 --sequence-parallel --seq 1023
          MATCH "--seq 1023 must divide by --tp 2 under --sequence-parallel")
  refused(NAME sequence_parallel_without_tp COMMAND ${STRATA_PLAN} ${GPT2} --sequence-parallel
          MATCH "--sequence-parallel needs --tp 2 or more")
  refused(NAME more_stages_than_layers COMMAND ${STRATA_PLAN} ${GPT2} --pp 16 --devices-per-node 16
          MATCH "--pp 16 pipeline stages for --layers 12")
  refused(NAME dp_replicate_not_dividing COMMAND ${STRATA_PLAN} ${GPT2} --dp 4 --dp-replicate 3
          MATCH "--dp-replicate 3 must divide --dp 4")
  refused(NAME param_offload_below_zero3 COMMAND ${STRATA_PLAN} ${GPT2} --zero-stage 2 --offload optimizer+params
          MATCH "--offload optimizer\\+params needs --zero-stage 3")
  refused(NAME context_parallel_seq COMMAND ${STRATA_PLAN} ${GPT2} --cp 4 --seq 1020
          MATCH "--seq 1020 must divide by 2 x --cp = 8")
  refused(NAME context_parallel_devices COMMAND ${STRATA_PLAN} ${GPT2} --cp 4 --dp 4 --devices-per-node 8
          MATCH "--dp 4 x --tp 1 x --pp 1 x --cp 4 = 16 devices, but --nodes 1 x --devices-per-node 8 = 8")
  # --longest-seq of a model whose state alone does not fit: says so and exits 2 (the plan's "does not fit").
  refused(NAME longest_seq_none COMMAND ${STRATA_PLAN} --params 70e9 --layers 80 --hidden 8192 --heads 64 --vocab 32000
          --seq 4096 --devices-per-node 8 --longest-seq MATCH "longest sequence: none fits, not even 128 tokens")
  accepted(NAME longest_seq_grows_with_cp COMMAND ${STRATA_PLAN} ${GPT2} --devices-per-node 8 --cp 8 --longest-seq
           MATCH "longest sequence that fits: [0-9]+ tokens \\(searched in steps of 1024\\).*x cp 8.*FITS")
  refused(NAME devices_overflow COMMAND ${STRATA_PLAN} ${GPT2} --dp 100000 --tp 100000 --pp 1000
          MATCH "--dp 100000 x --tp 100000 x --pp 1000 = 10000000000000 devices: at most 16777216")
  refused(NAME bandwidth_zero COMMAND ${STRATA_PLAN} ${GPT2} --link-gbs 0 MATCH "--link-gbs: must be a finite number > 0, got 0")
  refused(NAME tflops_nan COMMAND ${STRATA_PLAN} ${GPT2} --tflops nan MATCH "--tflops: must be a finite number > 0, got nan")
  refused(NAME params_negative COMMAND ${STRATA_PLAN} ${GPT2} --params -1
          MATCH "--params: must be a finite number in \\(0, 1000000000000000\\], got -1")
  refused(NAME device_memory_unit COMMAND ${STRATA_PLAN} ${GPT2} --device-memory 80XB
          MATCH "--device-memory='80XB': unknown unit 'XB'")
  refused(NAME device_memory_negative COMMAND ${STRATA_PLAN} ${GPT2} --device-memory -1GB
          MATCH "--device-memory='-1GB' must be a finite size in bytes")
  refused(NAME device_memory_zero COMMAND ${STRATA_PLAN} ${GPT2} --device-memory 0
          MATCH "--device-memory must be more than 0 bytes")
  refused(NAME cp_with_sequence_parallel COMMAND ${STRATA_PLAN} ${GPT2} --cp 2 --tp 2 --sequence-parallel
          MATCH "--cp 2 with --sequence-parallel: the runtime's context parallelism does not compose")
  refused(NAME offload_change_names_host COMMAND ${STRATA_PLAN} --params 70e9 --layers 80 --hidden 8192 --heads 64
          --seq 4096 --zero-stage 2 --dp 8
          MATCH "cheapest change that fits: .*--offload optimizer: [0-9.]+ GB per device and [0-9.]+ GB of host memory")
  # --inference: its own checks, and the document's case (docs/inference.md): a 70B model streams most layers on an
  # 80 GB device; one that cannot hold even the embeddings and two layer slots is refused with exit 2.
  set(LLAMA70 --params 70e9 --layers 80 --hidden 8192 --heads 64 --kv-heads 8 --vocab 32000 --seq 4096)
  refused(NAME inference_prompt_too_long COMMAND ${STRATA_PLAN} --inference ${GPT2} --prompt 1024
          MATCH "--prompt 1024 must be at least 1 and below --seq 1024")
  refused(NAME inference_kv_heads COMMAND ${STRATA_PLAN} --inference ${GPT2} --kv-heads 5
          MATCH "--kv-heads 5 must divide --heads 12")
  refused(NAME inference_host_gbs_zero COMMAND ${STRATA_PLAN} --inference ${GPT2} --host-gbs 0
          MATCH "--host-gbs: must be a finite number > 0, got 0")
  accepted(NAME inference_70b_h100 COMMAND ${STRATA_PLAN} --inference ${LLAMA70} --device-memory 80GB
           MATCH "resident layers +4[0-9] of 80.*bound +host link.*FITS; most tokens/s at batch")
  refused(NAME inference_70b_small_device COMMAND ${STRATA_PLAN} --inference ${LLAMA70} --device-memory 2GB
          MATCH "DOES NOT FIT: the smallest placement at batch 1 \\(0 layers resident")
  # Short of host memory, not of device memory: the message blames host memory, in its own unit (1K is 1000 bytes).
  refused(NAME inference_host_short COMMAND ${STRATA_PLAN} --inference ${GPT2} --host-memory 1K --kv-in host
          MATCH "needs [0-9.]+ MiB \\([0-9]+ bytes\\) of host memory \\(the KV cache and any streamed weights\\), against --host-memory 1000 bytes")
  # Real runs stay accepted: GPT-2 124M, 350M and 1.5B.
  accepted(NAME gpt2_124m COMMAND ${STRATA_PLAN} ${GPT2} MATCH "FITS")
  accepted(NAME gpt2_350m COMMAND ${STRATA_PLAN} --layers 24 --hidden 1024 --heads 16 --vocab 50257 --seq 1024
           MATCH "FITS")
  accepted(NAME gpt2_1558m COMMAND ${STRATA_PLAN} --layers 48 --hidden 1600 --heads 25 --vocab 50257 --seq 1024
           --dp 8 --tp 1 --link-gbs 100 --tflops 300 MATCH "FITS")

elseif(MODE STREQUAL "thread_limit_train_gpt")
  # OMP_THREAD_LIMIT=1 below the threads train_gpt asks OpenMP for must not change the losses (dnnl_sgemm used to
  # leave about half of each product unwritten): same run with and without it, and a warning naming the limit.
  set(args --steps 3 --embd 64 --heads 4 --seq 32 --ctx 32 --batch 8 --no-progress)
  set(losses)
  foreach(limit none 1)
    set(env)
    if(NOT limit STREQUAL "none")
      set(env OMP_THREAD_LIMIT=${limit})
    endif()
    execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${ONE_RANK} ${TRAIN_GPT} ${args}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 200)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "train_gpt (OMP_THREAD_LIMIT ${limit}) failed (${rc}):\n${out}")
    endif()
    string(REGEX MATCHALL "step [0-9]+ loss [0-9.]+" steps "${out}")
    list(LENGTH steps n)
    if(NOT n EQUAL 3)
      message(FATAL_ERROR "train_gpt (OMP_THREAD_LIMIT ${limit}): expected 3 step lines, got ${n}:\n${out}")
    endif()
    list(APPEND losses "${steps}")
    if(limit STREQUAL "1")
      set(limited_out "${out}")
    endif()
  endforeach()
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    list(GET losses ${i} a)
    math(EXPR j "${i} + ${n}")
    list(GET losses ${j} b)
    string(REGEX REPLACE ".* loss " "" la "${a}")
    string(REGEX REPLACE ".* loss " "" lb "${b}")
    # Losses are printed with 6 decimals; the thread count changes at most the last one (summation order).
    string(REPLACE "." "" ia "${la}")
    string(REPLACE "." "" ib "${lb}")
    math(EXPR diff "${ia} - ${ib}")
    if(diff GREATER 2 OR diff LESS -2)
      set_property(GLOBAL APPEND PROPERTY input_case_failures "step ${i}: ${a} without a limit, ${b} under OMP_THREAD_LIMIT=1")
    endif()
  endforeach()
  # train_gpt asks for the node's cores divided among its ranks: on a one-core machine nothing is lowered.
  cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
  if(cores GREATER 1 AND NOT limited_out MATCHES "OMP_THREAD_LIMIT=1 allows 1 OpenMP thread")
    set_property(GLOBAL APPEND PROPERTY input_case_failures "no warning naming OMP_THREAD_LIMIT under the limit")
  endif()
  message(STATUS "losses without a limit and under OMP_THREAD_LIMIT=1: ${losses}")

else()
  message(FATAL_ERROR "input_cases.cmake: unknown MODE '${MODE}'")
endif()

get_property(failures GLOBAL PROPERTY input_case_failures)
if(failures)
  list(LENGTH failures n)
  message(FATAL_ERROR "${MODE}: ${n} case(s) failed: ${failures}")
endif()
message(STATUS "${MODE}: every case passed")
