// strata-plan --inference: will this model serve from this device, how fast will it decode, and where should its
// weights and KV cache live? runtime/memory/inference_planner.h has the arithmetic (docs/inference.md).
#include "tools/strata_plan_inference.h"

#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/env.h"
#include "core/tool_main.h"
#include "runtime/memory/inference_planner.h"
#include "tools/plan_model_flags.h"

namespace flags = strata::flags;

// A size as data sheets give it: K, M, G, T (and KB, GB, ...) are powers of 1000, KiB ... TiB powers of 1024.
double data_sheet_bytes(const std::string& text, const char* flag) {
  const double binary = static_cast<double>(strata::parse_bytes(text, flag));
  if (text.find("iB") != std::string::npos || text.find("IB") != std::string::npos) return binary;
  const std::size_t unit = text.find_last_of("0123456789.") + 1;
  const char u = unit < text.size() ? static_cast<char>(std::toupper(static_cast<unsigned char>(text[unit]))) : 'B';
  const int power = u == 'K' ? 1 : u == 'M' ? 2 : u == 'G' ? 3 : u == 'T' ? 4 : 0;
  return binary * std::pow(1000.0 / 1024.0, power);
}

int plan_written(int rc) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  std::fprintf(stderr, "strata-plan: cannot write the plan to standard output: %s\n", std::strerror(errno));
  return 1;
}

int strata_plan_inference(int argc, char** argv) {
  CLI::App app{
      "strata-plan --inference: device memory and decode tokens/s of a model served from resident, "
      "host-streamed or disk-streamed weights, and the placement that decodes fastest"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  strata::InferenceInput in;
  bool inference = false, json = false;
  std::string weight_dtype = "bf16", kv_dtype = "bf16", device_memory = "80GB", host_memory = "512GB", kv_in = "auto",
              source = "host";
  app.add_flag("--inference", inference, "plan inference (this mode)")->required();
  PlanModelFlags model;  // --preset, the dimensions, the Llama family's shape (--kv-heads among them)
  model.add(app, "context per sequence: prompt plus generated tokens", 2);
  auto* prompt_flag = app.add_option("--prompt", in.prompt, "prompt tokens per sequence (default: half of --seq)")
                          ->check(flags::positive_integer());
  app.add_option("--batch", in.batch, "sequences decoded together (default: the batch with the most tokens/s)")
      ->check(flags::integer(1, strata::kMaxInferenceBatch));
  app.add_option("--tp", in.tp, "tensor-parallel degree (heads split over devices)")->check(flags::positive_integer());
  app.add_option("--param-dtype", weight_dtype, "weights: f32, bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--kv-dtype", kv_dtype, "KV cache: f32, bf16 or f16")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--resident-layers", in.resident_layers, "layers kept in device memory (default: as many as fit)")
      ->check(flags::non_negative_integer());
  app.add_option("--kv-in", kv_in, "where the KV cache lives: device, host or auto (the faster that fits)")
      ->check(CLI::IsMember({"device", "host", "auto"}));
  app.add_option("--weights-from", source,
                 "where layers that are not resident stream from: host, disk, or device (each device's part, with "
                 "--shard)")
      ->check(CLI::IsMember({"host", "disk", "device"}));
  app.add_option("--shard", in.shard,
                 "devices the streamed layers are sharded over, each fetching its part and all-gathering the layer "
                 "(ZeRO-Inference); each decodes its own batch")
      ->check(flags::positive_integer());
  app.add_option("--prefetch", in.prefetch_depth, "layers streamed ahead")->check(flags::integer(0, 8));
  app.add_option("--device-memory", device_memory, "memory per device, e.g. 80GB");
  app.add_option("--host-memory", host_memory, "host memory per device for streamed weights and a host KV cache");
  app.add_option("--device-gbs", in.hardware.device_gbs, "device memory bandwidth, GB/s")
      ->check(flags::positive_real());
  app.add_option("--host-gbs", in.hardware.host_gbs, "host -> device copy rate, GB/s")->check(flags::positive_real());
  app.add_option("--disk-gbs", in.hardware.disk_gbs, "disk read rate, GB/s")->check(flags::positive_real());
  app.add_option("--peer-gbs", in.hardware.peer_gbs, "all-gather bus bandwidth between the --shard devices, GB/s")
      ->check(flags::positive_real());
  app.add_option("--tflops", in.hardware.peak_tflops, "per-device peak 16-bit TFLOP/s")->check(flags::positive_real());
  app.add_option("--efficiency", in.hardware.efficiency, "fraction of peak the matrix products reach")
      ->check(flags::real(0.0, true));
  app.add_flag("--json", json, "print both plans as JSON");
  CLI11_PARSE(app, argc, argv);
  return strata::run_tool("strata-plan", [&]() -> int {
    in.model = model.shape();
    in.weight_dtype = strata::parse_dtype(weight_dtype);
    in.kv_dtype = strata::parse_dtype(kv_dtype);
    in.kv_on_device = kv_in == "device" ? 1 : kv_in == "host" ? 0 : -1;
    in.source = source == "disk"     ? strata::WeightSource::kDisk
                : source == "device" ? strata::WeightSource::kDevice
                                     : strata::WeightSource::kHost;
    in.hardware.device_memory = data_sheet_bytes(device_memory, "--device-memory");
    in.hardware.host_memory = data_sheet_bytes(host_memory, "--host-memory");
    if (prompt_flag->count() == 0) in.prompt = in.model.seq / 2;
    in.validate();
    const strata::InferencePlan single = strata::plan_inference(in, in.batch > 0 ? in.batch : 1);
    const strata::InferencePlan best = strata::best_inference_plan(in);
    if (json) {
      std::printf("{\"batch_1\":%s,\"best\":%s}\n", single.json().c_str(), best.json().c_str());
    } else {
      std::printf("%s", strata::inference_report(in, single, best).c_str());
    }
    return plan_written(best.fits ? 0 : 2);
  });
}
