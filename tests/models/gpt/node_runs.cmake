# Node-aware layouts rehearsed on one machine (cmake -P): STRATA_RANKS_PER_NODE=2 makes np 4 two nodes of two ranks.
#   --dp-shard node shards inside each node and replicates across the two (the mesh says dp_replicate 2 x dp_shard 2,
#   2 nodes) and trains bit for bit as --dp-replicate 2 does; the same job with Open MPI's TCP transport only
#   (btl tcp,self: no shared memory) trains to the same losses bit for bit. Nodes of 3 and 1 ranks are refused for
#   --dp-shard node on every rank before any step; a tp group across two nodes is a warning naming its ranks.
#   scripts/launch.sh prints and runs the expected mpirun commands; strata-plan without --dp takes dp from the cluster.
# -DMPIEXEC=<'|'-separated launcher words, without -n> -DTRAIN_GPT=<binary> -DSTRATA_PLAN=<binary>
# -DWORK=<scratch directory, emptied>.
include(${CMAKE_CURRENT_LIST_DIR}/../../support/run_checks.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run_checks.cmake)

set(common --steps 10 --no-progress --heads 4 --embd 32 --batch 3)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(ENV{STRATA_LOG_LEVEL} info)  # the start-up lines name the nodes and the mesh

function(run_gpt name expect np)
  run_checked(${name} ${expect} 120 ${launcher} -n ${np} ${TRAIN_GPT} ${common} --metrics ${WORK}/${name}.jsonl ${ARGN})
  set(${name}_out "${${name}_out}" PARENT_SCOPE)
endfunction()

# One machine, hybrid sharding asked for directly.
run_gpt(replicate ok 4 --dp-replicate 2)
read_metrics(replicate ${WORK}/replicate.jsonl)

# Two virtual nodes: the same layout, chosen by node.
set(ENV{STRATA_RANKS_PER_NODE} 2)
run_gpt(by_node ok 4 --dp-shard node)
expect_text(by_node "2 nodes of 2 ranks by STRATA_RANKS_PER_NODE"
            "mesh pp 1 x dp_replicate 2 x dp_shard 2 x tp 1 (4 ranks), 2 nodes")
string(FIND "${by_node_out}" "spans 2 nodes" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "by_node: a group spans nodes:\n${by_node_out}")
endif()
read_metrics(by_node ${WORK}/by_node.jsonl)
expect_steps(by_node replicate 0 9 exact)

# The same over TCP only (ob1 with the tcp and self transports, and STRATA_SHM=0 for Strata's own shared-memory
# collectives: no shared memory between the ranks).
set(ENV{OMPI_MCA_pml} ob1)
set(ENV{OMPI_MCA_btl} tcp,self)
set(ENV{STRATA_SHM} 0)
run_gpt(by_node_tcp ok 4 --dp-shard node)
read_metrics(by_node_tcp ${WORK}/by_node_tcp.jsonl)
expect_steps(by_node_tcp by_node 0 9 exact)
unset(ENV{OMPI_MCA_pml})
unset(ENV{OMPI_MCA_btl})
unset(ENV{STRATA_SHM})

# Nodes of 3 and 1 ranks cannot each hold one shard group.
set(ENV{STRATA_RANKS_PER_NODE} 3)
run_gpt(uneven fail 4 --dp-shard node)
expect_text(uneven "--dp-shard node needs the same number of ranks on every node; the 2 nodes hold 3, 1 ranks")
expect_no_steps_after(uneven -1)

# A tp group across two nodes of one rank each: it runs, and says which ranks.
set(ENV{STRATA_RANKS_PER_NODE} 1)
run_gpt(tp_across ok 2 --tp 2 --steps 1)
expect_text(tp_across "the tp group of ranks 0,1 spans 2 nodes")

# scripts/launch.sh: the command it prints for a 2-node hostfile (placed node by node, every STRATA_* variable
# forwarded, TCP only on request), and a real 2-rank run on this machine through it.
unset(ENV{STRATA_RANKS_PER_NODE})
set(launch ${CMAKE_CURRENT_LIST_DIR}/../../../scripts/launch.sh)
file(WRITE ${WORK}/hosts "node-a slots=4\n# a comment\nnode-b\n")
set(ENV{STRATA_TIMEOUT_S} 42)
run_checked(launch_dry ok 30 ${launch} --hostfile ${WORK}/hosts --ranks-per-node 4 --tcp --dry-run -- ${TRAIN_GPT} --steps 2)
expect_text(launch_dry "2 node(s) x 4 rank(s): mpirun -np 8 --map-by ppr:4:node --bind-to core --hostfile"
            "-x STRATA_TIMEOUT_S" "--mca pml ob1 --mca btl tcp" "--steps 2")
run_checked(launch_bad fail 30 ${launch} --hostfile ${WORK}/no-such-file -- ${TRAIN_GPT})
expect_text(launch_bad "cannot read hostfile")
run_checked(launch_local ok 120 ${launch} --ranks-per-node 2 --bind none -- ${TRAIN_GPT} ${common} --steps 2)
expect_text(launch_local "1 node(s) x 2 rank(s): mpirun -np 2" "step 1 loss")

# strata-plan without --dp: the data-parallel degree is what the cluster leaves after tp and pp, and it says so.
set(gpt2_xl --layers 48 --hidden 1600 --heads 25 --seq 1024 --zero-stage 3 --device-memory 80GB)
run_checked(plan_dp ok 30 ${STRATA_PLAN} ${gpt2_xl} --devices-per-node 8 --nodes 8 --pp 2)
expect_text(plan_dp "layout: dp 32 x tp 1 x pp 2" "(dp from --devices-per-node 8 x --nodes 8 / (tp 1 x pp 2))")
run_checked(plan_dp_bad fail 30 ${STRATA_PLAN} ${gpt2_xl} --devices-per-node 8 --nodes 1 --tp 3)
expect_text(plan_dp_bad "8 devices do not divide into --tp 3 x --pp 1; give --dp")
