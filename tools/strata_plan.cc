// strata-plan: will this model fit, and what must I turn on to make it fit? Per-device memory by category, from
// runtime/memory/memory_planner.h (the arithmetic is in docs/memory-model.md). With --simulate --cluster FILE, also the
// step time, its split and tokens/s on that cluster (runtime/memory/step_simulator.h, docs/scaling.md). With
// --inference, serving instead of training (tools/strata_plan_inference.cc, docs/inference.md). With --declaration
// FILE, the step of a model the trainer declared itself (tools/strata_plan_declaration.cc, docs/embedding.md). The
// model is given by its dimensions or --preset (GPT-2 or the Llama family: tools/plan_model_flags.h), and its exact
// parameter count is printed. No MPI, no device: a calculator.
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/env.h"
#include "core/error.h"
#include "core/tool_main.h"
#include "runtime/memory/memory_planner.h"
#include "runtime/memory/step_simulator.h"
#include "tools/plan_model_flags.h"
#include "tools/strata_plan_declaration.h"
#include "tools/strata_plan_inference.h"

namespace flags = strata::flags;

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--inference") == 0) return strata_plan_inference(argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--declaration", 13) == 0) return strata_plan_declaration(argc, argv);
  CLI::App app{"strata-plan: per-device memory of a sharded training run, whether it fits, and what would"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  strata::PlanInput in;
  int stage = 3;
  std::string param_dtype = "bf16", reduce_dtype = "f32", offload = "none", device_memory = "80GB";
  bool no_tiled = false, json = false;
  std::string recompute = "none";
  int recompute_every = 1;
  PlanModelFlags model;  // --preset, the dimensions, the Llama family's shape
  model.add(app, "sequence length", 1);
  app.add_option("--micro-batch", in.micro_batch, "sequences per device per micro-batch")
      ->check(flags::positive_integer());
  app.add_option("--zero-stage", stage, "0..3")->check(flags::integer(0, 3));
  auto* dp_flag = app.add_option("--dp", in.layout.dp,
                                 "data-parallel degree (default: --devices-per-node x --nodes / (tp x pp) when either "
                                 "is given, else 1)")
                      ->check(flags::positive_integer());
  app.add_option("--tp", in.layout.tp, "tensor-parallel degree")->check(flags::positive_integer());
  app.add_option("--pp", in.layout.pp, "pipeline stages")->check(flags::positive_integer());
  app.add_option("--cp", in.layout.cp, "context parallelism: each sequence split over this many devices (ring "
                 "attention; --seq a multiple of 2 x cp)")->check(flags::positive_integer());
  bool longest = false;
  app.add_flag("--longest-seq", longest, "search the longest --seq (a multiple of 2 x --cp x 64) that fits "
               "--device-memory with everything else as given, and plan it");
  app.add_flag("--sequence-parallel", in.layout.sequence_parallel,
               "sequence parallelism over the tp group (activations / tp; the sequence must divide by --tp)");
  app.add_option("--dp-replicate", in.layout.dp_replicate,
                 "hybrid sharding: replicate across this many groups, each sharding over dp / dp-replicate ranks")
      ->check(flags::positive_integer());
  app.add_option("--param-dtype", param_dtype, "f32, bf16 or f16")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--reduce-dtype", reduce_dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  flags::recompute_option(
      app, recompute,
      "what each layer keeps for its backward: none; full (alone: the layer's input only); attention (the attention "
      "core recomputed); mlp (the GELU recomputed); offload (its activations in host memory); a comma-separated kind "
      "per layer; auto: the least recomputation that fits --device-memory; default none");
  app.add_option("--recompute-every", recompute_every, "--recompute's kind on every K-th layer only")
      ->check(flags::positive_integer());
  app.add_flag("--no-tiled-attention", no_tiled, "attention that holds the s x s scores");
  app.add_option("--prefetch", in.prefetch_depth, "units gathered ahead")->check(flags::integer(0, 8));
  app.add_option("--offload", offload, "none, optimizer or optimizer+params")
      ->check(CLI::IsMember({"none", "optimizer", "optimizer+params"}));
  app.add_option("--device-memory", device_memory, "memory per device, e.g. 80GB");
  auto* per_node_flag = app.add_option("--devices-per-node", in.hardware.devices_per_node, "devices per node")
      ->check(flags::positive_integer());
  auto* nodes_flag = app.add_option("--nodes", in.hardware.nodes, "nodes")->check(flags::positive_integer());
  app.add_option("--link-gbs", in.hardware.link_gbs, "per-device collective bandwidth, GB/s (step-time estimate)")
      ->check(flags::positive_real());
  app.add_option("--tflops", in.hardware.peak_tflops, "per-device peak 16-bit TFLOP/s (step-time estimate)")
      ->check(flags::positive_real());
  app.add_flag("--json", json, "print the plan as JSON");
  bool simulate = false;
  std::string cluster_file, schedule = "1f1b", dp_shard;
  int microbatches = 0, virtual_stages = 1;
  long global_batch = 0;
  app.add_flag("--simulate", simulate, "predict the step time, its split, tokens/s and MFU on --cluster");
  app.add_option("--cluster", cluster_file, "cluster description for --simulate (tools/clusters/*.json)");
  app.add_option("--schedule", schedule, "pipeline schedule: gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  auto* mb_flag = app.add_option("--microbatches", microbatches,
                                 "micro-batches per step and data-parallel rank (default: --pp)")
                      ->check(flags::positive_integer());
  app.add_option("--virtual-stages", virtual_stages, "chunks per pipeline rank (--schedule interleaved)")
      ->check(flags::positive_integer());
  app.add_option("--global-batch", global_batch,
                 "sequences per step: sets --microbatches to global / (dp x --micro-batch)")
      ->check(flags::positive_integer());
  app.add_option("--dp-shard", dp_shard, "node: hybrid sharding, the state sharded inside each node and replicated "
                 "across nodes (needs --cluster or --devices-per-node)")->check(CLI::IsMember({"node"}));
  CLI11_PARSE(app, argc, argv);
  return strata::run_tool("strata-plan", [&]() -> int {
    in.model = model.shape();
    in.layout.stage = strata::zero_stage_from_int(stage);
    in.precision = {strata::parse_dtype(param_dtype), strata::parse_dtype(reduce_dtype)};
    in.tiled_attention = !no_tiled;
    in.offload = strata::offload_from_name(offload);
    in.hardware.device_memory = data_sheet_bytes(device_memory, "--device-memory");
    strata::ClusterSpec cluster;
    if (!cluster_file.empty()) {
      if (!simulate) {
        std::fprintf(stderr, "strata-plan: --cluster is read by --simulate; add --simulate\n");
        return 1;
      }
      cluster = strata::load_cluster(cluster_file);
      if (per_node_flag->count() == 0) in.hardware.devices_per_node = cluster.devices_per_node;
      in.hardware.device_memory = cluster.hbm_bytes;
    } else if (simulate) {
      std::fprintf(stderr, "strata-plan: --simulate needs --cluster FILE (tools/clusters/*.json)\n");
      return 1;
    }
    std::string dp_from;  // how the data-parallel degree was found, when it was not given
    if (dp_flag->count() == 0 && (per_node_flag->count() > 0 || nodes_flag->count() > 0)) {
      const long devices = static_cast<long>(in.hardware.devices_per_node) * in.hardware.nodes;
      const long model_parallel = static_cast<long>(in.layout.tp) * in.layout.pp * in.layout.cp;
      if (devices % model_parallel != 0) {
        std::fprintf(stderr, "strata-plan: --devices-per-node %d x --nodes %d = %ld devices do not divide into --tp %d "
                     "x --pp %d%s; give --dp\n", in.hardware.devices_per_node, in.hardware.nodes, devices,
                     in.layout.tp, in.layout.pp,
                     in.layout.cp > 1 ? fmt::format(" x --cp {}", in.layout.cp).c_str() : "");
        return 1;
      }
      in.layout.dp = static_cast<int>(devices / model_parallel);
      dp_from = fmt::format(" (dp from --devices-per-node {} x --nodes {} / (tp {} x pp {}{}))",
                            in.hardware.devices_per_node, in.hardware.nodes, in.layout.tp, in.layout.pp,
                            in.layout.cp > 1 ? fmt::format(" x cp {}", in.layout.cp) : std::string());
    }
    if (!dp_shard.empty()) {  // --dp-shard node: a shard group is the data-parallel ranks of one node
      const int per_node = in.hardware.devices_per_node;
      if (per_node % in.layout.tp != 0 || in.layout.dp % std::min(in.layout.dp, per_node / in.layout.tp) != 0) {
        std::fprintf(stderr, "strata-plan: --dp-shard node: %d devices per node hold %d / --tp %d data-parallel "
                     "ranks, which must divide --dp %d\n", per_node, per_node, in.layout.tp, in.layout.dp);
        return 1;
      }
      in.layout.dp_replicate = in.layout.dp / std::min(in.layout.dp, per_node / in.layout.tp);
    }
    if (simulate && nodes_flag->count() == 0) {  // as many nodes as the layout's devices fill
      const long devices = static_cast<long>(in.layout.dp) * in.layout.tp * in.layout.pp;
      in.hardware.nodes = static_cast<int>(
          std::min<long>((devices + in.hardware.devices_per_node - 1) / in.hardware.devices_per_node, 1L << 24));
    }
    if (global_batch > 0) {
      const long per_step = static_cast<long>(in.layout.dp) * in.micro_batch;
      if (mb_flag->count() > 0 || global_batch % per_step != 0) {
        std::fprintf(stderr, "strata-plan: --global-batch %ld must be a multiple of --dp %d x --micro-batch %d, "
                     "without --microbatches\n", global_batch, in.layout.dp, in.micro_batch);
        return 1;
      }
      microbatches = static_cast<int>(global_batch / per_step);
    }
    in.recompute = strata::RecomputePolicy::parse(recompute, recompute_every);
    std::string longest_note;
    if (longest) {
      if (simulate || in.recompute.automatic) {
        std::fprintf(stderr, "strata-plan: --longest-seq plans memory at a given recomputation: drop --simulate and "
                     "--recompute auto\n");
        return 1;
      }
      const strata::LongestSeq found = strata::longest_fitting_seq(in);
      if (found.seq == 0) {
        std::printf("longest sequence: none fits, not even %d tokens (%s)\n", found.step, found.why.c_str());
        return plan_written(2);
      }
      longest_note = fmt::format("longest sequence that fits: {} tokens (searched in steps of {}{})\n", found.seq,
                                 found.step, found.capped ? "; capped by the search's limit" : "");
      in.model.seq = found.seq;
    }
    in.validate();  // every cross-field check, naming the flags, before any arithmetic
    if (in.recompute.automatic) in.recompute = strata::choose_plan_recompute(in);
    auto print_model = [&] {
      std::printf("model: %s, seq %d, micro-batch %d\n", plan_model_text(in.model).c_str(), in.model.seq,
                  in.micro_batch);
    };
    if (simulate) {
      strata::SimInput sim;
      sim.plan = in;
      sim.cluster = cluster;
      sim.schedule = strata::pipeline_kind_from_name(schedule);
      sim.microbatches = microbatches;
      sim.virtual_stages = virtual_stages;
      strata::StepPrediction pred = strata::simulate_step(sim);
      if (json) {
        std::printf("%s\n", pred.json().c_str());
        return plan_written(pred.fits ? 0 : 2);
      }
      print_model();
      std::printf("layout: dp %d (replicas %d) x tp %d%s x pp %d (%s, %d micro-batches%s), ZeRO stage %d%s, "
                  "recompute %s\n", in.layout.dp, in.layout.dp_replicate, in.layout.tp,
                  in.layout.sequence_parallel ? " (sequence parallel)" : "", in.layout.pp, schedule.c_str(),
                  pred.microbatches, virtual_stages > 1 ? fmt::format(", {} virtual", virtual_stages).c_str() : "",
                  stage, dp_from.c_str(), in.recompute.describe(in.model.layers).c_str());
      std::printf("cluster: %s (%s)\n\n", cluster.name.c_str(), cluster_file.c_str());
      std::printf("%s", pred.table().c_str());
      std::printf("device memory %.1f GB: %s\n", cluster.hbm_bytes / 1e9, pred.fits ? "FITS" : "DOES NOT FIT");
      return plan_written(pred.fits ? 0 : 2);
    }
    strata::MemoryPlan p = strata::plan_memory(in);
    if (json) {
      std::printf("%s\n", p.json().c_str());
      return plan_written(p.fits ? 0 : 2);
    }
    print_model();
    if (!longest_note.empty()) std::printf("%s", longest_note.c_str());
    std::printf("layout: dp %d x tp %d%s x pp %d%s, ZeRO stage %d, %s params, %s reductions, recompute %s, tiled "
                "attention %s, offload %s%s\n\n",
                in.layout.dp, in.layout.tp, in.layout.sequence_parallel ? " (sequence parallel)" : "", in.layout.pp,
                in.layout.cp > 1 ? fmt::format(" x cp {}", in.layout.cp).c_str() : "",
                stage, param_dtype.c_str(), reduce_dtype.c_str(),
                in.recompute.describe(in.model.layers).c_str(), in.tiled_attention ? "on" : "off", offload.c_str(),
                dp_from.c_str());
    if (in.recompute.count(strata::BlockRecompute::kNone, in.model.layers) < in.model.layers)
      std::printf("recompute: --recompute %s%s runs %.4g FLOPs again per micro-batch on a device (%.1f%% more than the "
                  "step's 6 x parameters x tokens)\n\n", in.recompute.flags(in.model.layers).c_str(),
                  in.recompute.automatic ? " (auto's choice)" : "", p.recompute_flops,
                  100 * p.recompute_flops /
                      (6 * in.model.count_per_rank(in.layout.tp) / in.layout.pp * in.model.seq * in.micro_batch));
    std::printf("%s\n", p.table().c_str());
    std::printf("device memory %.1f GB: %s\n", in.hardware.device_memory / 1e9, p.fits ? "FITS" : "DOES NOT FIT");
    if (!p.fits) std::printf("cheapest change that fits: %s\n", p.advice.c_str());
    if (p.step_compute_s > 0 || p.step_comm_s > 0)
      std::printf("step estimate: compute %.3f s, data-parallel communication %.3f s (%s)\n", p.step_compute_s,
                  p.step_comm_s, p.step_comm_s <= p.step_compute_s ? "hides under compute" : "exposed");
    return plan_written(p.fits ? 0 : 2);
  });
}
