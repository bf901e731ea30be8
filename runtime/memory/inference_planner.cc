// The inference planner's arithmetic (docs/inference.md) and its placement search.
#include "runtime/memory/inference_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/byte_units.h"
#include "core/error.h"

namespace strata {
namespace {

// Parameters on one device outside the transformer layers: the token embedding (vocabulary-parallel; also the LM
// head when tied, which an untied model holds beside it), the position table (unless rotary) and the final norm.
// They are read every step and always resident.
double outside_layers(const ModelShape& m, int tp) { return m.embedding_per_rank(tp) + m.norm_params(); }

// One layer's parameters on one device. From the dimensions, ModelShape::layer_per_rank; with --params given, what
// is left of params / tp after the embeddings, split evenly over the layers.
double layer_params(const ModelShape& m, int tp) {
  if (m.params <= 0) return m.layer_per_rank(tp);
  return std::max(0.0, m.count_per_rank(tp) - outside_layers(m, tp)) / m.layers;
}

int kv_heads_of(const InferenceInput& in) { return in.kv_heads > 0 ? in.kv_heads : in.model.kv_head_count(); }

// Keys and values of one position in one layer on one device: its kv heads (split by tp, or one replicated when there
// are fewer than tp), head_dim each.
double kv_layer_token(const InferenceInput& in) {
  const double kv_heads_here = std::ceil(static_cast<double>(kv_heads_of(in)) / in.tp);
  return 2 * kv_heads_here * in.model.head_width() * static_cast<double>(dtype_size(in.kv_dtype));
}

}  // namespace

const char* weight_source_name(WeightSource s) {
  switch (s) {
    case WeightSource::kHost:
      return "host";
    case WeightSource::kDisk:
      return "disk";
    case WeightSource::kDevice:
      return "device";
  }
  return "?";
}

std::size_t shard_part(std::size_t block_bytes, int shard) {
  if (shard <= 1) return block_bytes;
  const std::size_t n = static_cast<std::size_t>(shard);
  return (block_bytes + 4 * n - 1) / (4 * n) * 4;
}

DecodeRowWidths DecodeRowWidths::of(const ModelShape& m, int tp) {
  DecodeRowWidths w;
  const double q = m.q_width() / tp, kv = m.kv_width_per_rank(tp), F = static_cast<double>(m.ffn_width()) / tp;
  w.hidden = m.hidden;
  w.qkv = q + 2 * kv;
  w.att = q;
  w.up = m.gated ? 2 * F : F;
  w.act = F;
  w.heads = static_cast<double>(m.heads) / tp;
  w.vocab_rows = std::ceil(static_cast<double>(m.vocab) / tp);
  w.tp = tp;
  return w;
}

double DecodeRowWidths::floats_per_row() const {
  return 3 + 5 * hidden + qkv + att + heads + up + act + vocab_rows + (tp > 1 ? tp * vocab_rows : 0);
}

double DecodeMemory::part() const { return static_cast<double>(shard_part(static_cast<std::size_t>(block), shard)); }

double DecodeMemory::slot() const { return shard > 1 ? shard * part() : block; }

int DecodeMemory::slots(int resident) const { return stream_slots(prefetch_depth, layers - resident); }

double DecodeMemory::slot_bytes(int resident) const { return slots(resident) * slot(); }

double DecodeMemory::shard_bytes(int resident) const {
  return source == WeightSource::kDevice ? (layers - resident) * part() : 0;
}

int DecodeMemory::kv_layers(bool kv_on_host) const {
  return kv_on_host ? stream_slots(prefetch_depth, layers) : layers;
}

double DecodeMemory::kv_bytes(bool kv_on_host) const { return kv_layers(kv_on_host) * kv_layer; }

double DecodeMemory::total(int resident, bool kv_on_host) const {
  return outside + tables + resident * block + slot_bytes(resident) + shard_bytes(resident) + kv_bytes(kv_on_host) +
         workspace;
}

int DecodeMemory::most_resident(double budget, bool kv_on_host) const {
  int r = layers;
  while (r > 0 && total(r, kv_on_host) > budget) --r;
  return r;
}

DecodeMemory decode_memory(const InferenceInput& in, int batch) {
  const ModelShape& m = in.model;
  const double wb = static_cast<double>(dtype_size(in.weight_dtype));
  DecodeMemory d;
  d.layers = m.layers;
  d.outside = outside_layers(m, in.tp) * wb;
  d.tables = m.rotary ? static_cast<double>(m.seq) * m.head_width() * 4 : 0;
  d.block = layer_params(m, in.tp) * wb;
  d.kv_layer = static_cast<double>(batch) * m.seq * kv_layer_token(in);
  d.workspace = decode_pass_rows(batch) * DecodeRowWidths::of(m, in.tp).floats_per_row() * 4;
  d.source = in.source;
  d.prefetch_depth = in.prefetch_depth;
  d.shard = in.shard;
  return d;
}

void InferenceInput::validate() const {
  const ModelShape& m = model;
  STRATA_CHECK(m.layers >= 1 && m.hidden >= 1 && m.heads >= 1 && m.seq >= 2,
               "--layers {}, --hidden {} and --heads {} must each be at least 1, --seq {} at least 2", m.layers,
               m.hidden, m.heads, m.seq);
  STRATA_CHECK(m.vocab >= 0 && std::isfinite(m.params) && m.params >= 0, "--vocab {} and --params {} must be >= 0",
               m.vocab, m.params);
  STRATA_CHECK(m.head_dim > 0 || m.hidden % m.heads == 0, "--heads {} must divide --hidden {} (or give --head-dim)",
               m.heads, m.hidden);
  STRATA_CHECK(kv_heads >= 0 && m.kv_heads >= 0 && m.head_dim >= 0 && m.ffn >= 0,
               "--kv-heads {}, --head-dim {} and --ffn {} must each be >= 0", kv_heads > 0 ? kv_heads : m.kv_heads,
               m.head_dim, m.ffn);
  STRATA_CHECK(m.heads % kv_heads_of(*this) == 0, "--kv-heads {} must divide --heads {} (grouped-query attention)",
               kv_heads_of(*this), m.heads);
  STRATA_CHECK(tp >= 1 && m.heads % tp == 0 && m.hidden % tp == 0, "--tp {} must divide --heads {} and --hidden {}", tp,
               m.heads, m.hidden);
  STRATA_CHECK(prompt >= 1 && prompt < m.seq,
               "--prompt {} must be at least 1 and below --seq {} (the context: prompt plus generated tokens)", prompt,
               m.seq);
  STRATA_CHECK(batch >= 0 && batch <= kMaxInferenceBatch, "--batch {} must be in [1, {}] (0: searched)", batch,
               kMaxInferenceBatch);
  STRATA_CHECK(resident_layers >= -1 && resident_layers <= m.layers,
               "--resident-layers {} must be in [0, --layers {}] (-1: as many as fit)", resident_layers, m.layers);
  STRATA_CHECK(prefetch_depth >= 0 && prefetch_depth <= 8, "--prefetch {} must be in [0, 8]", prefetch_depth);
  STRATA_CHECK(shard >= 1, "--shard {} must be at least 1", shard);
  STRATA_CHECK(source != WeightSource::kDevice || shard > 1,
               "--weights-from device keeps each device's part of the streamed layers in device memory: it needs "
               "--shard 2 or more (with --shard 1, keep the layers resident)");
  const InferenceHardware& hw = hardware;
  STRATA_CHECK(hw.device_memory > 0 && hw.host_memory > 0 && hw.device_gbs > 0 && hw.host_gbs > 0 && hw.disk_gbs > 0 &&
                   hw.peer_gbs > 0 && hw.peak_tflops > 0 && hw.efficiency > 0 && hw.efficiency <= 1,
               "--device-memory, --host-memory, --device-gbs, --host-gbs, --disk-gbs, --peer-gbs and --tflops must be "
               "> 0 (got {}, {}, {}, {}, {}, {}, {}) and the efficiency in (0, 1] (got {})",
               hw.device_memory, hw.host_memory, hw.device_gbs, hw.host_gbs, hw.disk_gbs, hw.peer_gbs, hw.peak_tflops,
               hw.efficiency);
}

InferencePlan plan_inference_at(const InferenceInput& in, int batch, int resident_layers, bool kv_on_device) {
  const ModelShape& m = in.model;
  const InferenceHardware& hw = in.hardware;
  const double b = batch, h = m.hidden, L = m.layers, s = m.seq;
  const double vocab_rows = std::ceil(static_cast<double>(m.vocab) / in.tp);

  InferencePlan p;
  p.batch = batch;
  p.resident_layers = resident_layers;
  p.streamed_layers = m.layers - resident_layers;
  p.kv_on_device = kv_on_device;
  const DecodeMemory mem = decode_memory(in, batch);
  const double layer = layer_params(m, in.tp), outside = outside_layers(m, in.tp);
  const double flops_per_s = hw.peak_tflops * 1e12 * hw.efficiency;
  const double streamed = p.streamed_layers * mem.block;
  // Under a shard group each device holds or fetches one part of a streamed layer and receives the others' parts;
  // a slot holds every part (the last zero-padded).
  const double fetched = p.streamed_layers * mem.part();  // by this device from its source, each pass
  const bool on_device = in.source == WeightSource::kDevice;
  const double link_weights = on_device ? 0 : fetched;  // over the host link, each pass
  p.kv_bytes_per_token = L * kv_layer_token(in);

  p.resident_weights = mem.outside + resident_layers * mem.block;
  p.stream_buffers = mem.slot_bytes(resident_layers);  // none when none stream
  p.weight_shards = mem.shard_bytes(resident_layers);
  const double kv_all = mem.kv_bytes(false);  // every sequence's whole context, every layer
  (kv_on_device ? p.kv_cache : p.kv_staging) = mem.kv_bytes(!kv_on_device);
  // The widest pass's activations and logits (f32) and a rotary table.
  p.workspace = mem.workspace + mem.tables;
  p.total = mem.total(resident_layers, !kv_on_device);
  p.host_bytes = (in.source == WeightSource::kHost ? fetched : 0) + (kv_on_device ? 0 : kv_all);
  p.fits = p.total <= hw.device_memory && p.host_bytes <= hw.host_memory;

  // Decode: G = seq - prompt tokens a sequence, the first from the prefill; decode step k (1 .. G - 1) attends to
  // prompt + k positions, prompt + G / 2 on average (GptDecoder counts the same).
  const double generated = s - in.prompt;
  const double context = in.prompt + generated / 2;
  const double kv_read = b * context * p.kv_bytes_per_token;
  const double all_weights = p.resident_weights + streamed;
  p.device_bytes = all_weights + kv_read;  // a streamed layer is read from its slot once it has arrived
  // Host <-> device: this device's part of the streamed layers (unless it holds them), and from a host cache each
  // sequence's cached positions in and its new one out, the positions its query attends to.
  p.link_bytes = link_weights + (kv_on_device ? 0 : kv_read);
  p.disk_bytes = in.source == WeightSource::kDisk ? fetched : 0;
  p.gather_bytes = p.streamed_layers * (mem.slot() - mem.part());
  // Two FLOPs a parameter for each sequence, and the attention's q.k and a.v over the context: 4 q / tp per token
  // of context and layer (q = heads x head_dim, h for a GPT-2 block).
  double looked_up = m.rotary ? 0 : s * h;  // not multiplied: the position table, and an untied token embedding
  if (!m.tied) looked_up += vocab_rows * h;
  const double params_here = outside - looked_up + L * layer;
  const double q = m.q_width();
  p.flops = 2 * params_here * b + L * b * 4 * context * q / in.tp;
  p.device_s = p.device_bytes / (hw.device_gbs * 1e9);
  p.link_s = p.link_bytes / (hw.host_gbs * 1e9);
  p.disk_s = p.disk_bytes / (hw.disk_gbs * 1e9);
  p.gather_s = p.gather_bytes / (hw.peer_gbs * 1e9);
  p.compute_s = p.flops / flops_per_s;
  p.step_s = std::max({p.device_s, p.link_s, p.disk_s, p.gather_s, p.compute_s});
  p.bound = p.step_s == p.compute_s  ? "compute"
            : p.step_s == p.disk_s   ? "disk"
            : p.step_s == p.link_s   ? "host link"
            : p.step_s == p.gather_s ? "interconnect"
                                     : "device memory bandwidth";
  p.tokens_per_s = b / p.step_s;
  p.bytes_per_token = (p.device_bytes + p.link_bytes + p.gather_bytes) / b;

  // Prefill of the batch's prompts: every weight streamed once, the matrix products on batch x prompt tokens, the
  // causal attention over half the prompt on average.
  const double P = in.prompt;
  const double prefill_flops = 2 * params_here * b * P + L * b * 4 * (P + 1) / 2 * P * q / in.tp;
  const double prefill_s = std::max({prefill_flops / flops_per_s, link_weights / (hw.host_gbs * 1e9),
                                     p.disk_bytes / (hw.disk_gbs * 1e9), p.gather_s});
  p.prefill_tokens_per_s = b * P / prefill_s;
  return p;
}

InferencePlan plan_inference(const InferenceInput& in, int batch) {
  InferencePlan best;
  bool found = false;
  for (bool kv_on_device : {true, false}) {
    if (in.kv_on_device >= 0 && kv_on_device != (in.kv_on_device == 1)) continue;
    // Device memory grows with every resident layer: the most that fit it (GptDecoder's rule), unless the count is
    // given; none when host memory cannot hold what they would leave to stream (fewer leave more).
    int r = in.resident_layers;
    if (r < 0) {
      r = decode_memory(in, batch).most_resident(in.hardware.device_memory, !kv_on_device);
      if (!plan_inference_at(in, batch, r, kv_on_device).fits) r = 0;
    }
    InferencePlan p = plan_inference_at(in, batch, r, kv_on_device);
    if (!found || (p.fits && (!best.fits || p.tokens_per_s > best.tokens_per_s)) ||
        (!p.fits && !best.fits && p.total < best.total)) {
      best = p;
      found = true;
    }
  }
  return best;
}

InferencePlan best_inference_plan(const InferenceInput& in) {
  if (in.batch > 0) return plan_inference(in, in.batch);
  InferencePlan best = plan_inference(in, 1);
  for (int b = 2; b <= kMaxInferenceBatch && best.fits; b *= 2) {
    InferencePlan p = plan_inference(in, b);
    if (!p.fits) break;  // memory grows with the batch: no larger one fits either
    if (p.tokens_per_s > best.tokens_per_s) best = p;
  }
  return best;
}

std::string InferencePlan::json() const {
  nlohmann::json j{{"batch", batch},
                   {"resident_layers", resident_layers},
                   {"streamed_layers", streamed_layers},
                   {"kv_on_device", kv_on_device},
                   {"resident_weights", resident_weights},
                   {"stream_buffers", stream_buffers},
                   {"weight_shards", weight_shards},
                   {"kv_cache", kv_cache},
                   {"kv_staging", kv_staging},
                   {"workspace", workspace},
                   {"total", total},
                   {"fits", fits},
                   {"host_bytes", host_bytes},
                   {"kv_bytes_per_token", kv_bytes_per_token},
                   {"device_bytes_per_step", device_bytes},
                   {"link_bytes_per_step", link_bytes},
                   {"disk_bytes_per_step", disk_bytes},
                   {"gather_bytes_per_step", gather_bytes},
                   {"flops_per_step", flops},
                   {"step_s", step_s},
                   {"bound", bound},
                   {"tokens_per_s", tokens_per_s},
                   {"bytes_per_token", bytes_per_token},
                   {"prefill_tokens_per_s", prefill_tokens_per_s}};
  return j.dump();
}

std::string inference_report(const InferenceInput& in, const InferencePlan& single, const InferencePlan& best) {
  const ModelShape& m = in.model;
  const InferenceHardware& hw = in.hardware;
  std::string out = fmt::format(
      "model: {} parameters ({:.2f}B), {} layers, hidden {}, {} heads ({} key/value), vocab {}, {} weights, {} KV "
      "cache\n"
      "context: {} tokens ({} prompt, {} generated), tp {}, layers beyond the resident ones from {}{}\n"
      "device: {:.1f} GB at {:.0f} GB/s, {:.0f} TFLOP/s x {:.2f}; host: {:.0f} GB, link {:.1f} GB/s; disk {:.1f} "
      "GB/s{}\n\n",
      grouped_count(m.count()), m.count() / 1e9, m.layers, m.hidden, m.heads, kv_heads_of(in), m.vocab,
      dtype_name(in.weight_dtype), dtype_name(in.kv_dtype), m.seq, in.prompt, m.seq - in.prompt, in.tp,
      in.source == WeightSource::kDisk   ? "disk"
      : in.source == WeightSource::kHost ? "host memory"
                                         : "device memory",
      in.shard > 1 ? fmt::format(", sharded over {} devices and gathered layer by layer", in.shard) : std::string(),
      hw.device_memory / 1e9, hw.device_gbs, hw.peak_tflops, hw.efficiency, hw.host_memory / 1e9, hw.host_gbs,
      hw.disk_gbs, in.shard > 1 ? fmt::format("; all-gather {:.0f} GB/s", hw.peer_gbs) : std::string());
  const bool two = best.batch != single.batch;
  auto gb = [](double x) { return fmt::format("{:.2f}", x / 1e9); };
  auto row = [&](const std::string& name, const std::string& a, const std::string& b) {
    out += fmt::format("{:<34} {:>24}{}\n", name, a, two ? fmt::format(" {:>24}", b) : std::string());
  };
  row("", fmt::format("batch {}", single.batch), fmt::format("batch {}", best.batch));
  auto both = [&](const std::string& name, auto f) { row(name, f(single), f(best)); };
  both("resident layers", [&](const InferencePlan& p) { return fmt::format("{} of {}", p.resident_layers, m.layers); });
  both("KV cache in", [](const InferencePlan& p) { return std::string(p.kv_on_device ? "device" : "host"); });
  both("resident weights GB", [&](const InferencePlan& p) { return gb(p.resident_weights); });
  both("stream buffers GB", [&](const InferencePlan& p) { return gb(p.stream_buffers); });
  if (in.source == WeightSource::kDevice)
    both("weight shards GB", [&](const InferencePlan& p) { return gb(p.weight_shards); });
  both("KV cache GB", [&](const InferencePlan& p) { return gb(p.kv_cache); });
  both("KV staging GB", [&](const InferencePlan& p) { return gb(p.kv_staging); });
  both("workspace GB", [&](const InferencePlan& p) { return gb(p.workspace); });
  both("device total GB", [&](const InferencePlan& p) { return gb(p.total) + (p.fits ? "" : " (over)"); });
  both("host memory GB",
       [&](const InferencePlan& p) { return gb(p.host_bytes) + (p.host_bytes > hw.host_memory ? " (over)" : ""); });
  both("KV bytes per token and sequence",
       [](const InferencePlan& p) { return fmt::format("{:.0f}", p.kv_bytes_per_token); });
  both("step: device memory ms", [](const InferencePlan& p) { return fmt::format("{:.2f}", p.device_s * 1e3); });
  both("step: host link ms", [](const InferencePlan& p) { return fmt::format("{:.2f}", p.link_s * 1e3); });
  if (in.source == WeightSource::kDisk)
    both("step: disk ms", [](const InferencePlan& p) { return fmt::format("{:.2f}", p.disk_s * 1e3); });
  if (in.shard > 1)
    both("step: all-gather ms", [](const InferencePlan& p) { return fmt::format("{:.2f}", p.gather_s * 1e3); });
  both("step: compute ms", [](const InferencePlan& p) { return fmt::format("{:.2f}", p.compute_s * 1e3); });
  both("bound", [](const InferencePlan& p) { return p.bound; });
  both("decode tokens/s", [](const InferencePlan& p) { return fmt::format("{:.4g}", p.tokens_per_s); });
  both("ms per generated token", [](const InferencePlan& p) { return fmt::format("{:.4g}", 1e3 / p.tokens_per_s); });
  both("bytes moved per generated token",
       [](const InferencePlan& p) { return fmt::format("{:.4g}", p.bytes_per_token); });
  both("prefill tokens/s", [](const InferencePlan& p) { return fmt::format("{:.4g}", p.prefill_tokens_per_s); });
  out += "\n";
  if (!best.fits && best.total <= hw.device_memory)  // the device holds it: host memory is what is short
    out += fmt::format(
        "DOES NOT FIT: the smallest placement at batch {} ({} layers resident, the KV cache in {}) needs {} of host "
        "memory ({}), against --host-memory {}: give a larger --host-memory{}\n",
        best.batch, best.resident_layers, best.kv_on_device ? "device memory" : "host memory",
        bytes_text(static_cast<std::uint64_t>(best.host_bytes)),
        best.kv_on_device ? "the streamed weights" : "the KV cache and any streamed weights",
        bytes_text(static_cast<std::uint64_t>(hw.host_memory)),
        best.kv_on_device ? "" : ", or keep the KV cache in device memory");
  else if (!best.fits)
    out += fmt::format(
        "DOES NOT FIT: the smallest placement at batch {} ({} layers resident, the KV cache in {}) "
        "needs {:.2f} GB on the device, against {:.2f} GB: give more --tp or a larger --device-memory\n",
        best.batch, best.resident_layers, best.kv_on_device ? "device memory" : "host memory", best.total / 1e9,
        hw.device_memory / 1e9);
  else
    out += fmt::format("FITS; most tokens/s at batch {} ({}{}), {:.4g} tokens/s\n", best.batch,
                       best.streamed_layers > 0 ? fmt::format("{} layers streamed", best.streamed_layers)
                                                : std::string("every layer resident"),
                       best.kv_on_device ? "" : ", the KV cache in host memory", best.tokens_per_s);
  return out;
}

}  // namespace strata
