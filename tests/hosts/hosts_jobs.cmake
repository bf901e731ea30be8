# Jobs across real hosts (cmake -P, run by scripts/hosts.sh inside its launcher namespace; hosts_runs.cmake starts it):
# two hosts of two ranks each, each host its own network namespace, host name, /dev/shm and disk, TCP between them.
#   - ZeRO-3 over both hosts, pp 2 with one stage per host, hybrid sharding by host (--dp-shard node) and tp 2 within
#     each host equal the same layouts on one host (compare_runs: losses and norms within 1e-6 relative); the node map
#     is the hosts' own (no STRATA_RANKS_PER_NODE).
#   - Checkpoints where each host sees only its own directory: saved at step 10, each host holds its ranks' files and
#     the index; --resume on the same hosts gives steps 10-19 bit for bit; a resume at another layout names the file
#     this host lacks; strata-ckpt assemble puts the parts in one directory, which resumes at np 2 on one host; --save
#     on per-host disks is refused before any step.
#   - A host lost at step 12 (at_step.sh kills its every rank, or takes its link down): launch.sh --max-restarts 1
#     finishes the 30 steps on the other host from the last checkpoint, at the same global batch, equal to a run on one
#     host within 1e-5; a failure that names no host is not restarted.
#   - A link taken down mid-run (at_step.sh): every rank ends within STRATA_TIMEOUT_S + 5 s, the message naming the
#     host: through launch.sh, whose keepalives let Open MPI end the job, launcher included; with them off, through
#     Strata's own timeout, which names the silent ranks' host.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT= -DCOMPARE= -DSTRATA_CKPT= -DLAUNCH=<launch.sh>
# -DAT_STEP=<at_step.sh> -DWORK=<scratch directory, emptied> -DDISK=<the path each host sees as its own disk>
# -DHOST_DISKS=<the directory holding each host's disk, host0 ...>.
include(${CMAKE_CURRENT_LIST_DIR}/../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../models/gpt/gpt_run_checks.cmake)

set(common --steps 20 --no-progress --heads 4 --embd 32 --batch 3)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(ENV{STRATA_LOG_LEVEL} info)
set(hosts ${LAUNCH} --hostfile $ENV{STRATA_HOSTFILE} --ranks-per-node 2 --bind none --)
set(failed)

# run_one(<name> args...): np 4 on one host (this launcher namespace). run_hosts(<name> args...): 2 hosts x 2 ranks.
function(run_one name)
  run_checked(${name} ok 180 ${launcher} -n 4 ${TRAIN_GPT} ${common} --metrics ${WORK}/${name}.jsonl ${ARGN})
endfunction()
function(run_hosts name expect)
  run_checked(${name} ${expect} 180 ${hosts} ${TRAIN_GPT} ${common} --metrics ${WORK}/${name}.jsonl ${ARGN})
  set(${name}_out "${${name}_out}" PARENT_SCOPE)
endfunction()

# ---- Layouts across the hosts against the same on one host ----------------------------------------------------
foreach(row "zero3|--zero-stage,3" "pp2|--pp,2,--zero-stage,3,--batch,4" "hybrid|--dp-shard,node|--dp-replicate,2"
            "tp2|--tp,2,--zero-stage,1")
  string(REPLACE "|" ";" fields "${row}")
  list(GET fields 0 name)
  list(GET fields 1 flags)
  string(REPLACE "," ";" flags "${flags}")
  set(one_flags ${flags})
  list(LENGTH fields n)
  if(n GREATER 2)  # one host has one node: hybrid sharding asked for directly
    list(GET fields 2 one_flags)
    string(REPLACE "," ";" one_flags "${one_flags}")
  endif()
  run_one(${name}_one ${one_flags})
  run_hosts(${name}_hosts ok ${flags})
  expect_text(${name}_hosts "(local 0/2, 2 nodes)")
  string(FIND "${${name}_hosts_out}" "STRATA_RANKS_PER_NODE=" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${name}_hosts: the node map came from STRATA_RANKS_PER_NODE:\n${${name}_hosts_out}")
  endif()
  compare_to(${name}_hosts ${name}_one 1e-6 1e-6)
endforeach()
expect_text(pp2_hosts "mesh pp 2 x dp_replicate 1 x dp_shard 2 x tp 1 (4 ranks), 2 nodes")
expect_text(hybrid_hosts "mesh pp 1 x dp_replicate 2 x dp_shard 2 x tp 1 (4 ranks), 2 nodes")
if(failed)
  message(FATAL_ERROR "across hosts, differing from one host: ${failed}")
endif()

# ---- Checkpoints on per-host disks ----------------------------------------------------------------------------
set(ckpt ${DISK}/ckpt)
run_hosts(save ok --zero-stage 3 --checkpoint-dir ${ckpt} --checkpoint-every 10 --stop-at 10)
expect_text(save "2 groups of ranks see files of their own: ranks 0,1; ranks 2,3")
foreach(h 0 1)
  math(EXPR a "2 * ${h}")
  math(EXPR b "2 * ${h} + 1")
  math(EXPR other_a "2 - 2 * ${h}")
  set(step ${HOST_DISKS}/host${h}/ckpt/step-00000010)
  foreach(f index.json COMMITTED rank-0000${a}.bin rank-0000${b}.bin)
    if(NOT EXISTS ${step}/${f})
      message(FATAL_ERROR "host${h} has no ${f} in its step-00000010")
    endif()
  endforeach()
  if(EXISTS ${step}/rank-0000${other_a}.bin)
    message(FATAL_ERROR "host${h} holds rank ${other_a}'s file: the disks are not the hosts' own")
  endif()
endforeach()
run_hosts(resume ok --zero-stage 3 --checkpoint-dir ${ckpt} --resume)
read_metrics(resume ${WORK}/resume.jsonl)
read_metrics(zero3_hosts ${WORK}/zero3_hosts.jsonl)
expect_steps(resume zero3_hosts 10 19 exact)

# Another layout needs the other host's files: named, on every rank, before any step.
run_checked(other_layout fail 180 ${LAUNCH} --hostfile $ENV{STRATA_HOSTFILE} --ranks-per-node 1 --bind none --
            ${TRAIN_GPT} ${common} --zero-stage 3 --checkpoint-dir ${ckpt} --resume)
expect_text(other_layout "is not there as this rank sees it" "strata-ckpt assemble")
expect_no_steps_after(other_layout -1)

# Put together on the launcher's disk, the checkpoint resumes at np 2 on one host (1e-5: another reduction order).
run_checked(assemble ok 60 ${STRATA_CKPT} assemble ${WORK}/assembled ${HOST_DISKS}/host0/ckpt ${HOST_DISKS}/host1/ckpt
            --step 10)
expect_text(assemble "step-00000010: 4 files from 2 part(s)")
run_checked(assembled_resume ok 180 ${launcher} -n 2 ${TRAIN_GPT} ${common} --batch 6 --zero-stage 3
            --checkpoint-dir ${WORK}/assembled --resume --metrics ${WORK}/assembled_resume.jsonl)
read_metrics(assembled_resume ${WORK}/assembled_resume.jsonl)
expect_steps(assembled_resume zero3_hosts 10 19 relative)

# --save writes one file that every rank writes into: refused where the hosts' disks are their own.
run_hosts(save_file fail --steps 1 --save ${DISK}/weights.safetensors)
expect_text(save_file "--save ${DISK}/weights.safetensors: 2 groups of ranks see files of their own")
expect_no_steps_after(save_file -1)

# ---- A host lost, the job restarted on the other -----------------------------------------------------------------
# 30 steps of 12 rows (--global-batch: 1 micro-batch a step on 2 hosts x 2 ranks, 2 on one host's 2 ranks), a model
# large enough that a step takes tens of ms (at_step polls the metrics), checkpoints every 5 steps on storage both hosts
# see. Every rank of host1 is killed once 12 steps are recorded: launch.sh --max-restarts 1 relaunches on host0 with
# --resume, from the last checkpoint (step 10, or 15 on a machine slower to kill than to train). The run's metrics (the
# steps before the kill, then those trained again appended) equal a run that trained all 30 steps on one host's 2 ranks
# within 1e-5 (another reduction order).
set(ENV{STRATA_TIMEOUT_S} 10)
set(restart_flags --steps 30 --global-batch 12 --zero-stage 3 --embd 256 --layers 4 --seq 32 --ctx 32)
run_checked(restart_one ok 180 ${launcher} -n 2 ${TRAIN_GPT} ${common} ${restart_flags}
            --metrics ${WORK}/restart_one.jsonl)
run_checked(restart ok 300 ${AT_STEP} --wait 240 ${WORK}/restart.jsonl 12 kill-ranks host1 train_gpt --
            ${LAUNCH} --hostfile $ENV{STRATA_HOSTFILE} --ranks-per-node 2 --bind none --max-restarts 1 --
            ${TRAIN_GPT} ${common} ${restart_flags} --checkpoint-dir ${WORK}/restart_ckpt --checkpoint-every 5
            --metrics ${WORK}/restart.jsonl)
expect_text(restart "launch.sh: restart 1 of 1: host(s) host1 failed (mpirun noticed that process rank"
            "on 1 host(s) (host0) x 2 rank(s)" "2 data-parallel ranks x 3 rows x 32 tokens x 2 micro-batches")
string(FIND "${restart_out}" "rows a step" at)  # --resume's warning of another global batch
if(NOT at EQUAL -1)
  message(FATAL_ERROR "restart: resumed at another global batch:\n${restart_out}")
endif()
if(NOT restart_out MATCHES "resumed from ${WORK}/restart_ckpt/step-000000(10|15)")
  message(FATAL_ERROR "restart: not resumed from step 10 or 15:\n${restart_out}")
endif()
read_metrics(restart_one ${WORK}/restart_one.jsonl)
read_metrics(restart ${WORK}/restart.jsonl)
expect_steps(restart restart_one 0 29 relative)
# The host itself lost (its link down): Open MPI names it through the keepalives; the same restart on host0.
run_checked(restart_link ok 300 ${AT_STEP} --wait 240 ${WORK}/restart_link.jsonl 12 link-down host1 train_gpt --
            ${LAUNCH} --hostfile $ENV{STRATA_HOSTFILE} --ranks-per-node 2 --bind none --max-restarts 1 --
            ${TRAIN_GPT} ${common} ${restart_flags} --checkpoint-dir ${WORK}/restart_link_ckpt --checkpoint-every 5
            --metrics ${WORK}/restart_link.jsonl)
expect_text(restart_link "launch.sh: restart 1 of 1: host(s) host1 failed (Remote daemon: " "on node host1)"
            "on 1 host(s) (host0) x 2 rank(s)")
read_metrics(restart_link ${WORK}/restart_link.jsonl)
expect_steps(restart_link restart_one 0 29 relative)
# A failure that names no host is not restarted: --global-batch 10 does not split over 4 ranks' rows of 3.
run_checked(no_restart fail 120 ${LAUNCH} --hostfile $ENV{STRATA_HOSTFILE} --ranks-per-node 2 --bind none
            --max-restarts 1 -- ${TRAIN_GPT} ${common} --global-batch 10)
expect_text(no_restart "--global-batch 10 is not a whole number of rows for each of the 4 data-parallel ranks"
            "no host was named as lost and every host answers: no restart")
string(FIND "${no_restart_out}" "launch.sh: restart" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "no_restart: relaunched after a failure that names no host:\n${no_restart_out}")
endif()
unset(ENV{STRATA_TIMEOUT_S})

# ---- A link taken down mid-run ------------------------------------------------------------------------------------
# ended_within(<name> <what> <limit>): at_step's "<what> ended N s" line in <name>_out says N < limit.
function(ended_within name what limit)
  if(NOT ${name}_out MATCHES "${what} ended ([0-9]+)(\\.[0-9]*)? s")
    message(FATAL_ERROR "${name}: at_step did not see ${what} end:\n${${name}_out}")
  endif()
  if(CMAKE_MATCH_1 GREATER_EQUAL ${limit})
    message(FATAL_ERROR "${name}: ${what} ended ${CMAKE_MATCH_1} s after the link went down, not within ${limit} s")
  endif()
  message(STATUS "${name}: ${what} ended ${CMAKE_MATCH_1}${CMAKE_MATCH_2} s after the link went down")
endfunction()
set(ENV{STRATA_TIMEOUT_S} 10)
set(link_job ${hosts} ${TRAIN_GPT} ${common} --steps 100000 --zero-stage 3)
# Through launch.sh as it is: Open MPI's daemons, on keepalives tied to STRATA_TIMEOUT_S, end the whole job.
run_checked(link_down fail 120 ${AT_STEP} ${WORK}/link_down.jsonl 3 link-down host1 train_gpt -- ${link_job}
            --metrics ${WORK}/link_down.jsonl)
expect_text(link_down "lost communication with a remote daemon" "on node host1")
ended_within(link_down "every rank" 15)
ended_within(link_down "the launcher" 15)
# A launcher that does not notice (keepalives off): Strata's own timeout ends every rank, naming the silent host.
set(ENV{OMPI_MCA_oob_tcp_keepalive_time} 0)
run_checked(link_down_strata fail 120 ${AT_STEP} ${WORK}/link_down_strata.jsonl 3 link-down host1 train_gpt --
            ${link_job} --metrics ${WORK}/link_down_strata.jsonl)
unset(ENV{OMPI_MCA_oob_tcp_keepalive_time})
unset(ENV{STRATA_TIMEOUT_S})
expect_text(link_down_strata "timed out after 10 s (STRATA_TIMEOUT_S)"
            "ranks 2,3 on host1 never arrived" "waiting in it: ranks 0,1 on host0")
ended_within(link_down_strata "every rank" 15)
