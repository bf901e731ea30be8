// strata-generate: text or token ids in, generated tokens out, from a committed checkpoint (any layout it was saved
// at) or a safetensors file (a Llama-style model's with Hugging Face's names), through the decode path
// (gpt_decoder.h). Prints prefill and decode tokens/s, the time
// per generated token and the bytes read per generated token. The CPU backend unless --backend says cuda; under
// mpirun groups of --tp ranks decode tensor parallel and the groups share out the prompts (data parallel over
// requests), with --shard-weights holding one part each of the streamed blocks and gathering them every pass
// (ZeRO-Inference); rank 0 prints them in order (docs/inference.md). The ranks first agree on every setting that must
// match, and every weight is checked finite before any rank decodes.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/rank_values.h"
#include "core/byte_units.h"
#include "core/env.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "kernels/cpu/threads.h"
#include "models/gpt/inference/finite_weights.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "models/gpt/model/hf_llama_weights.h"
#include "models/gpt/model/llama_shape_flags.h"
#include "models/gpt/model/model_record.h"
#include "models/gpt/training/gpt_trainer_state.h"
#include "models/hf/hf_config.h"
#include "runtime/bootstrap/config_agreement.h"
#include "runtime/bootstrap/runtime.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/checkpoint_index.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/data/tokenizer.h"
#include "runtime/inference/generator.h"
#include "runtime/parallel/device_mesh.h"

namespace {

using namespace strata;
namespace flags = strata::flags;

struct Flags {
  std::string checkpoint, weights, prompt_text, tokenizer;
  std::vector<std::string> prompt_tokens;
  std::int64_t step = -1;
  int heads = 0, max_new_tokens = 32, top_k = 0;
  double temperature = 0, top_p = 1;
  std::uint64_t seed = 0;
  std::vector<int> stop;
  bool quiet = false, shard_weights = false;
  // Weight placement (gpt_decoder.h's DecodePlacement).
  int resident_layers = -1, prefetch = 1, tp = 1;
  int threads = 0;  // compute threads per rank (0: the rank's share of the cores, less the decoder's copy threads)
  std::string device_memory, weights_from = "host", kv_in = "device", backend = "cpu";
  std::string family;  // --family; empty: what the weights say (Hugging Face Llama names, a checkpoint's record)
  // --family llama from --weights: the shape flags (llama_shape_flags.h) and --ctx (0 until given).
  gpt::GptConfig llama{0, 0, 0, 0, 0};
};

// Every setting the ranks must share, for check_config_agreement: the weights and the shape flags, the prompts, the
// sampling, the generation's length and stops, the layout (tp, sharding, placement, backend). Ranks started with any of
// these differing would print tokens no setting gives alone, mislabel lines, or wait in collectives the others never
// issue. --threads and --quiet may differ (each rank's own speed, what rank 0 prints).
std::vector<ConfigField> agreed_settings(const Flags& f) {
  auto num = [](auto v) { return fmt::format("{}", v); };
  auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  const gpt::GptConfig& m = f.llama;
  return {{"program", "strata-generate"},
          {"--checkpoint", f.checkpoint},
          {"--step", f.step >= 0 ? num(f.step) : std::string("(the latest)")},
          {"--weights", f.weights},
          {"--family", f.family},
          {"--heads", num(f.heads)},
          {"--ctx", num(m.ctx)},
          {"--kv-heads", num(m.kv_heads)},
          {"--head-dim", num(m.head_dim)},
          {"--ffn", num(m.ffn)},
          {"--rope-theta", num(m.rope_theta)},
          {"--norm-eps", num(m.norm_eps)},
          {"--untied", on(!m.tied)},
          {"--qkv-bias", on(m.qkv_bias)},
          {"--prompt", f.prompt_text},
          {"--tokenizer", f.tokenizer},
          {"--tokens", fmt::format("{}", fmt::join(f.prompt_tokens, " "))},
          {"--max-new-tokens", num(f.max_new_tokens)},
          {"--temperature", num(f.temperature)},
          {"--top-k", num(f.top_k)},
          {"--top-p", num(f.top_p)},
          {"--seed", num(f.seed)},
          {"--stop", fmt::format("{}", fmt::join(f.stop, ","))},
          {"--tp", num(f.tp)},
          {"--shard-weights", on(f.shard_weights)},
          {"--resident-layers", num(f.resident_layers)},
          {"--device-memory", f.device_memory},
          {"--weights-from", f.weights_from},
          {"--prefetch", num(f.prefetch)},
          {"--kv-in", f.kv_in},
          {"--backend", f.backend}};
}

// The weights and the model's shape from a checkpoint directory or a safetensors file.
struct Weights {
  gpt::GptConfig cfg;
  gpt::WeightReader read;
  std::string source;
};

Weights llama_weights(const std::shared_ptr<SafetensorsReader>& file, const gpt::GptConfig& cfg);

// A Llama-style model from a safetensors file of Hugging Face names (LlamaForCausalLM's): its layers, width and
// vocabulary from the tensors, and its heads and context from --heads and --ctx (no tensor counts them); the other
// shape flags, where given, win over what the tensors imply (head_dim from q_proj's rows, key-value heads from
// k_proj's, the MLP from gate_proj's, an untied head from lm_head.weight, biases from q_proj.bias). HfLlamaWeights then
// refuses a file that disagrees with the result, naming the tensor and both shapes.
Weights llama_from_hf(const std::shared_ptr<SafetensorsReader>& file, const Flags& f) {
  STRATA_CHECK_CODE(ErrorCode::kIo, gpt::has_hf_llama_names(*file),
                    "{}: --family llama reads Hugging Face's names (model.embed_tokens.weight, model.layers.{{i}}.*); "
                    "this file has none (decode train_gpt's own weights from its --checkpoint-dir)",
                    file->path());
  STRATA_CHECK(f.heads > 0 && f.llama.ctx > 0,
               "{}: a Llama-style model's attention heads and context are in no tensor: give --heads and --ctx (now "
               "{} and {})",
               file->path(), f.heads, f.llama.ctx);
  const std::string pre = file->contains("model.embed_tokens.weight") ? "model." : "";
  auto rows = [&](const std::string& name) -> int {
    return file->contains(pre + name) ? static_cast<int>(file->info(pre + name).shape.at(0)) : 0;
  };
  const std::vector<std::int64_t>& emb = file->info(pre + "embed_tokens.weight").shape;
  STRATA_CHECK_CODE(ErrorCode::kIo, emb.size() == 2, "{}: {}embed_tokens.weight is not 2-D", file->path(), pre);
  gpt::GptConfig cfg = f.llama;
  cfg.family = gpt::Family::kLlama;
  cfg.heads = f.heads;
  cfg.vocab = static_cast<int>(emb[0]);
  cfg.embd = static_cast<int>(emb[1]);
  cfg.layers = 0;
  while (file->contains(pre + "layers." + std::to_string(cfg.layers) + ".input_layernorm.weight")) ++cfg.layers;
  if (cfg.head_dim == 0) cfg.head_dim = rows("layers.0.self_attn.q_proj.weight") / cfg.heads;
  if (cfg.kv_heads == 0 && cfg.head_dim > 0) cfg.kv_heads = rows("layers.0.self_attn.k_proj.weight") / cfg.head_dim;
  if (cfg.ffn == 0) cfg.ffn = rows("layers.0.mlp.gate_proj.weight");
  cfg.tied = cfg.tied && !file->contains("lm_head.weight");
  cfg.qkv_bias = cfg.qkv_bias || file->contains(pre + "layers.0.self_attn.q_proj.bias");
  return llama_weights(file, cfg);
}

// HfLlamaWeights over `file` for the model `cfg` (which it checks every tensor against).
Weights llama_weights(const std::shared_ptr<SafetensorsReader>& file, const gpt::GptConfig& cfg) {
  cfg.validate();
  auto hf = std::make_shared<const gpt::HfLlamaWeights>(*file, cfg);
  Weights w;
  w.cfg = cfg;
  w.source = file->path();
  // Const reads without a cache: a disk stream's two blocks at once are fine.
  w.read = [file, hf](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    hf->read(name, begin, count, out);
  };
  return w;
}

// Whether --ctx or a Llama shape flag was given: they describe a Llama-style model read from --weights.
bool llama_flags_given(const gpt::GptConfig& m) {
  const gpt::GptConfig d;
  return m.ctx != 0 || m.kv_heads != d.kv_heads || m.head_dim != d.head_dim || m.ffn != d.ffn || m.tied != d.tied ||
         m.qkv_bias != d.qkv_bias || m.rope_theta != d.rope_theta || m.norm_eps != d.norm_eps;
}

// A GPT-2 from a safetensors file (or set) of the spec's names: its dimensions from the tensors, `heads` given.
Weights gpt2_weights(const std::shared_ptr<SafetensorsReader>& file, int heads, const std::string& source) {
  Weights w;
  w.source = source;
  w.cfg = gpt::config_from_shapes(
      [&](const std::string& name) -> const std::vector<std::int64_t>* {
        return file->contains(name) ? &file->info(name).shape : nullptr;
      },
      heads, source);
  w.read = [file](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    file->read_f32(name, begin, count, out);
  };
  return w;
}

// A Hugging Face model directory: its config.json is the family and the shape (the shape flags are refused: the
// directory gives them), its model.safetensors or sharded index the weights.
Weights from_model_directory(const std::string& dir, const Flags& f) {
  const hf::HfConfig c = hf::read_hf_config(dir);
  const gpt::GptConfig model = c.gpt2 ? gpt::GptConfig(c.gpt.layers, c.gpt.heads, c.gpt.hidden, c.gpt.vocab, c.gpt.ctx)
                                      : gpt::llama_model(c.llama);
  STRATA_CHECK(f.heads == 0 || f.heads == model.heads, "--heads {}: {} has {} heads (drop --heads)", f.heads, c.path,
               model.heads);
  STRATA_CHECK(!llama_flags_given(f.llama),
               "--weights {} is a model directory: its config.json gives the shape, so "
               "--ctx and the Llama shape flags are not taken",
               dir);
  STRATA_CHECK(f.family.empty() || f.family == (c.gpt2 ? "gpt2" : "llama"), "--family {}: {} describes {}", f.family,
               c.path, c.architecture);
  auto file = std::make_shared<SafetensorsReader>(dir);
  if (!c.gpt2) return llama_weights(file, model);
  Weights w = gpt2_weights(file, model.heads, dir);
  STRATA_CHECK_CODE(
      ErrorCode::kIo,
      w.cfg.layers == model.layers && w.cfg.embd == model.embd && w.cfg.vocab == model.vocab && w.cfg.ctx == model.ctx,
      "{}: the weights are {} layers of {}, vocabulary {}, {} positions; {} says {}, {}, {}, {}", dir, w.cfg.layers,
      w.cfg.embd, w.cfg.vocab, w.cfg.ctx, c.path, model.layers, model.embd, model.vocab, model.ctx);
  return w;
}

Weights from_safetensors(const std::string& path, const Flags& f) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return from_model_directory(path, f);
  auto file = std::make_shared<SafetensorsReader>(path);
  if (f.family == "llama" || (f.family.empty() && gpt::has_hf_llama_names(*file))) return llama_from_hf(file, f);
  return gpt2_weights(file, f.heads, path);
}

Weights from_checkpoint(const std::string& path, std::int64_t step_flag, const Flags& f) {
  // A CheckpointReader reads through its own staging and opens files as it goes, so each thread reading at once
  // (streamed blocks are read from disk two at a time) borrows one of its own.
  struct Reader {
    std::vector<char> staging;
    std::unique_ptr<CheckpointReader> reader;
  };
  struct Open {
    std::string step_dir;
    CheckpointIndex index;
    std::mutex mutex;
    std::vector<std::unique_ptr<Reader>> idle;
    std::unique_ptr<Reader> take() {
      {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!idle.empty()) {
          std::unique_ptr<Reader> r = std::move(idle.back());
          idle.pop_back();
          return r;
        }
      }
      auto r = std::make_unique<Reader>();
      r->staging.resize(index.block_bytes);
      r->reader = std::make_unique<CheckpointReader>(step_dir, index, r->staging.data());
      return r;
    }
    void give(std::unique_ptr<Reader> r) {
      const std::lock_guard<std::mutex> lock(mutex);
      idle.push_back(std::move(r));
    }
  };
  const CheckpointDir dir(path);
  const std::int64_t step = step_flag >= 0 ? step_flag : dir.latest_step();
  STRATA_CHECK_CODE(ErrorCode::kIo, step >= 0, "--checkpoint {}: no committed checkpoint", path);
  auto open = std::make_shared<Open>();
  open->step_dir = dir.step_path(step);
  open->index = dir.read_index(step);
  // The record of the run: its family, and the heads (GPT-2) or the whole shape (Llama) its weights do not show.
  Weights w;
  w.source = dir.step_path(step);
  w.cfg = gpt::checkpoint_model(open->index, w.source, f.heads);
  const std::string family = gpt::family_name(w.cfg.family);
  STRATA_CHECK(f.family.empty() || f.family == family, "--family {}: the checkpoint {} records a {} model", f.family,
               w.source, family);
  w.read = [open](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    std::unique_ptr<Reader> r = open->take();
    r->reader->read_f32(open->index.tensor(params_tensor(name)), begin, count, out);  // a failed one is dropped
    open->give(std::move(r));
  };
  return w;
}

// "3,17,42" -> token ids.
std::vector<std::int32_t> parse_ids(const std::string& text) {
  std::vector<std::int32_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK(used == item.size() && !item.empty() && v >= 0 && v <= std::numeric_limits<std::int32_t>::max(),
                 "--tokens '{}': '{}' is not a token id", text, item);
    out.push_back(static_cast<std::int32_t>(v));
  }
  return out;
}

std::string as_text(const std::vector<std::int32_t>& tokens) {
  std::string s;
  for (std::int32_t t : tokens) s += static_cast<char>(t);
  return s;
}

// The rank's lines: one per prompt it generated for ("<index>\t<line>"), then its timing lines.
std::string rank_report(const Flags& f, const Tokenizer* tok, const std::vector<std::size_t>& mine,
                        const Generation& g, int rank, int world) {
  std::string out;
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const std::vector<std::int32_t>& t = g.tokens[k];
    out += fmt::format("{}\t", mine[k]);
    if (!f.prompt_text.empty() && mine[k] == 0) {
      out += f.prompt_text + (tok ? tok->decode(t) : as_text(t));
    } else {
      out += fmt::format("{}: {}", mine[k], fmt::join(t, ","));
    }
    out += '\n';
  }
  if (f.quiet || mine.empty()) return out;
  const std::string who = world > 1 ? fmt::format("rank {}: ", rank) : std::string();
  const double decoded = static_cast<double>(g.decoded_tokens());
  out += fmt::format("-\t{}prefill: {:.1f} tokens/s ({:.3f} s)\n", who,
                     static_cast<double>(g.prompt_tokens) / std::max(g.prefill_s, 1e-12), g.prefill_s);
  if (decoded > 0)
    out += fmt::format(
        "-\t{}decode: {:.1f} tokens/s, {:.3f} ms per generated token ({} steps); read per generated token: {:.0f} "
        "bytes of weights + {:.0f} of KV cache\n",
        who, decoded / std::max(g.decode_s, 1e-12), 1e3 * g.decode_s / decoded, g.decode_steps,
        static_cast<double>(g.decode_weight_bytes) / decoded, static_cast<double>(g.decode_cache_bytes) / decoded);
  if (decoded > 0 && g.decode_streamed_bytes > 0)
    out += fmt::format("-\t{}streamed into the device per generated token: {:.0f} bytes of weights\n", who,
                       static_cast<double>(g.decode_streamed_bytes) / decoded);
  if (decoded > 0 && g.decode_cache_link_bytes > 0)
    out += fmt::format("-\t{}KV cache copied between host and device per generated token: {:.0f} bytes\n", who,
                       static_cast<double>(g.decode_cache_link_bytes) / decoded);
  if (decoded > 0 && g.decode_gathered_bytes > 0)
    out += fmt::format("-\t{}gathered from the shard group per generated token: {:.0f} bytes of weights{}\n", who,
                       static_cast<double>(g.decode_gathered_bytes) / decoded,
                       g.idle_passes > 0 ? fmt::format(" ({} idle passes to keep in step)", g.idle_passes)
                                         : std::string());
  return out;
}

int run(const Flags& f, Runtime& rt) {
  STRATA_CHECK(f.checkpoint.empty() != f.weights.empty(), "give one of --checkpoint DIR and --weights FILE");
  const Weights w = f.checkpoint.empty() ? from_safetensors(f.weights, f) : from_checkpoint(f.checkpoint, f.step, f);
  // What the flags resolved to: the step a checkpoint's latest was on each rank (a run committing while the ranks
  // start), and the model read.
  check_config_agreement({{"the weights read", w.source}, {"their model", w.cfg.describe()}});
  STRATA_CHECK(!llama_flags_given(f.llama) || (w.cfg.llama() && f.checkpoint.empty()),
               "--ctx and the Llama shape flags (--kv-heads, --head-dim, --ffn, --rope-theta, --norm-eps, --untied, "
               "--qkv-bias) describe a Llama-style model read from --weights; {} is {}",
               w.source, w.cfg.llama() ? "a checkpoint, which records its shape" : "a GPT-2");
  std::vector<std::vector<std::int32_t>> prompts;
  const bool text = !f.prompt_text.empty();
  // --tokenizer: the prompt's text through the model's tokenizer (runtime/data), the generated tokens back to text.
  const std::unique_ptr<Tokenizer> tok = f.tokenizer.empty() ? nullptr : load_tokenizer(f.tokenizer);
  if (tok)
    STRATA_CHECK(tok->vocab_size() <= w.cfg.vocab, "--tokenizer {}: its {} ids do not fit the model's vocabulary of "
                 "{}", f.tokenizer, tok->vocab_size(), w.cfg.vocab);
  if (text && tok) {
    prompts.push_back(tok->encode(f.prompt_text));
  } else if (text) {
    STRATA_CHECK(w.cfg.vocab == 256,
                 "--prompt is byte-level text, for a model of vocab 256 (train_gpt --text); this "
                 "one has {}: give --tokenizer (the model's tokenizer.json or tokenizer.model) or --tokens",
                 w.cfg.vocab);
    std::vector<std::int32_t> p;
    for (unsigned char c : f.prompt_text) p.push_back(c);
    prompts.push_back(p);
  }
  for (const std::string& t : f.prompt_tokens) prompts.push_back(parse_ids(t));
  STRATA_CHECK(!prompts.empty(), "give --prompt TEXT or --tokens IDS (repeat --tokens for a batch)");
  check_prompts(w.cfg.vocab, w.cfg.ctx, prompts);  // on every rank, before any rank generates
  // Tensor parallel within groups of --tp consecutive ranks, data parallel over the prompts between the groups: group
  // g of G takes prompts g, g + G, ...; each samples with its prompt's global index, so the tokens do not depend on
  // the rank count. The group's first rank reports its prompts.
  const int world = rt.world_size(), rank = rt.rank();
  STRATA_CHECK(f.tp >= 1 && world % f.tp == 0, "--tp {} must divide the {} ranks", f.tp, world);
  w.cfg.validate_tp(f.tp, false, w.cfg.ctx);
  // Every value once, shared over the ranks, after the checks above (cheap) and before any rank decodes: a NaN or inf
  // weight is refused on every rank naming the tensor and element, whatever the placement (finite_weights.h).
  gpt::check_finite_weights(w.cfg, w.read, w.source, rt.world());
  // The mesh's tp groups (consecutive ranks) decode together; its data-parallel groups (the ranks of the same tp rank
  // in every tp group) share out the prompts, and with --shard-weights hold one part each of the streamed blocks.
  DeviceMesh mesh(rt, MeshDims{1, 1, -1, f.tp});
  Communicator* group = f.tp > 1 ? &mesh.tp() : nullptr;
  STRATA_CHECK(!f.shard_weights || world > f.tp,
               "--shard-weights shares the streamed blocks among the data-parallel ranks: it needs more ranks than "
               "--tp {} (now {})",
               f.tp, world);
  Communicator* shard_group = f.shard_weights ? &mesh.dp_shard() : nullptr;
  STRATA_CHECK(f.weights_from != "device" || shard_group,
               "--weights-from device keeps each rank's part of the streamed blocks in device memory: give "
               "--shard-weights and more ranks than --tp {} (now {})",
               f.tp, world);
  const int groups = mesh.dp_shard().size(), my_group = mesh.dp_shard().rank();
  const bool speaks = mesh.tp().rank() == 0;
  std::vector<std::size_t> mine;
  std::vector<std::vector<std::int32_t>> local;
  GenerateOptions o;
  for (std::size_t i = static_cast<std::size_t>(my_group); i < prompts.size(); i += static_cast<std::size_t>(groups)) {
    mine.push_back(i);
    local.push_back(prompts[i]);
    o.sequence_ids.push_back(i);
  }
  o.max_new_tokens = f.max_new_tokens;
  o.stop_tokens.assign(f.stop.begin(), f.stop.end());
  o.sampling = SamplingOptions{f.temperature, f.top_k, f.top_p, f.seed};
  o.sampling.validate();
  gpt::DecodePlacement where;
  where.resident_layers = f.resident_layers;
  where.prefetch_depth = f.prefetch;
  where.kv_on_host = f.kv_in == "host";
  where.source = f.weights_from == "disk"     ? WeightSource::kDisk
                 : f.weights_from == "device" ? WeightSource::kDevice
                                              : WeightSource::kHost;
  // Sharded weights with no placement asked for: every block streams through the shard group (ZeRO-3).
  if (shard_group && f.resident_layers < 0 && f.device_memory.empty()) where.resident_layers = 0;
  if (!f.device_memory.empty()) where.device_memory = parse_memory_budget(f.device_memory, "--device-memory");
  Generation g;
  std::string placement;
  // Under a shard group every rank takes part in every pass, with prompts or without.
  if (!local.empty() || shard_group) {
    const int seqs = std::max<int>(1, static_cast<int>(local.size()));
    gpt::GptDecoder dec(w.cfg, rt.device(), seqs, w.read, decode_pass_rows(seqs), DType::kF32, where, group,
                        shard_group);
    // The rank's share of the node's cores (as train_gpt's), less the threads that copy streamed blocks beside the
    // compute: a copy sharing a core with the products slows both (docs/inference.md).
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / rt.local_size());
    const int threads = f.threads > 0 ? f.threads : compute_threads(cores, dec);
    cpu::set_num_threads(threads);
    const int streamed = w.cfg.layers - dec.resident_layers();
    placement = fmt::format("{} of {} blocks resident", dec.resident_layers(), w.cfg.layers);
    if (streamed > 0)
      placement += fmt::format(
          ", {} streamed from {} (prefetch {}, {} of stream slots){}", streamed,
          where.source == WeightSource::kDisk   ? w.source
          : where.source == WeightSource::kHost ? std::string("host memory")
                                                : std::string("device memory"),
          where.prefetch_depth, bytes_text(dec.stream_slot_bytes()),
          shard_group ? fmt::format(", sharded over {} ranks and gathered every pass", shard_group->size())
                      : std::string());
    if (where.kv_on_host)
      placement += fmt::format("; KV cache in host memory ({}, {} of device staging)",
                               bytes_text(dec.cache_host_bytes()), bytes_text(dec.cache_staging_bytes()));
    placement += fmt::format("; {} of device memory", bytes_text(dec.device_bytes()));
    if (rt.device().kind() == DeviceKind::kCpu)
      placement += fmt::format(
          "; computing on {} thread(s) a rank{}", cpu::num_threads(),
          dec.copy_threads() > 0 ? fmt::format(", {} more copying the streamed blocks in", dec.copy_threads()) : "");
    if (!local.empty() || dec.lockstep_group()) g = generate(dec, local, o);
  }
  // Rank 0 prints every prompt's line in prompt order, then the ranks' timing lines.
  const std::vector<std::string> reports =
      gather_texts(rt.world(), speaks ? rank_report(f, tok.get(), mine, g, rank, world) : std::string(), 0);
  if (rank != 0) return 0;
  std::vector<std::string> lines(prompts.size()), timing;
  for (const std::string& r : reports) {
    std::size_t at = 0;
    while (at < r.size()) {
      const std::size_t end = r.find('\n', at), tab = r.find('\t', at);
      const std::string key = r.substr(at, tab - at), line = r.substr(tab + 1, end - tab - 1);
      if (key == "-") {
        timing.push_back(line);
      } else {
        lines[std::stoul(key)] = line;
      }
      at = end + 1;
    }
  }
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  if (!f.quiet) {
    const std::string shape = w.cfg.llama()
                                  ? w.cfg.describe()
                                  : fmt::format("{} layers, {} wide, {} heads, vocab {}, context {}", w.cfg.layers,
                                                w.cfg.embd, w.cfg.heads, w.cfg.vocab, w.cfg.ctx);
    std::fprintf(stderr, "strata-generate: %s (%s); %zu prompt(s) on %d rank(s)\n", w.source.c_str(), shape.c_str(),
                 prompts.size(), world);
    if (!placement.empty()) std::fprintf(stderr, "strata-generate: weights: %s\n", placement.c_str());
    for (const std::string& t : timing) std::fprintf(stderr, "%s\n", t.c_str());
  }
  return 0;
}

// SIGTERM or SIGINT while the job runs (a scheduler's cancel, mpirun forwarding one, a kill from outside): one line on
// standard error naming the rank and the signal, then the default action, so the exit status still says the signal.
// Nothing is half-written: rank 0 prints the generated lines only once every prompt is done, and no file is written.
char g_stop_line[160];
std::size_t g_stop_len = 0;

void on_stop_signal(int sig) {
  const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
  if (g_stop_len > 0) (void)!::write(STDERR_FILENO, g_stop_line, g_stop_len);
  (void)!::write(STDERR_FILENO, name, std::strlen(name));
  static constexpr char kTail[] = "; no generated line was printed\n";
  (void)!::write(STDERR_FILENO, kTail, sizeof(kTail) - 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void report_stop_signals(int rank, int world) {
  const std::string line = fmt::format("strata-generate: rank {}/{}: stopped by ", rank, world);
  g_stop_len = std::min(line.size(), sizeof(g_stop_line));
  std::memcpy(g_stop_line, line.data(), g_stop_len);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "strata-generate: tokens from a trained GPT-2 or Llama-style model (docs/inference.md); ranks share out the "
      "prompts"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  Flags f;
  app.add_option("--checkpoint", f.checkpoint, "a checkpoint directory (train_gpt --checkpoint-dir): its latest step");
  app.add_option("--step", f.step, "the checkpoint's step to load (default: the latest committed)")
      ->check(flags::non_negative_int64());
  app.add_option("--weights", f.weights,
                 "a safetensors file (strata-ckpt export, train_gpt --init's format, or a Hugging Face Llama's), or "
                 "a Hugging Face model directory (config.json and model.safetensors or its shards: the shape too)");
  app.add_option("--heads", f.heads, "attention heads (default: the checkpoint's record)")
      ->check(flags::positive_integer());
  app.add_option("--family", f.family,
                 "gpt2 or llama (docs/llama-model.md); default: llama for a --weights file of Hugging Face Llama names "
                 "(model.embed_tokens.weight, ...) or a checkpoint of a --family llama run, else gpt2")
      ->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--ctx", f.llama.ctx,
                 "--family llama from --weights: the positions of the rotary table (max_position_embeddings)")
      ->check(flags::positive_integer());
  // The Llama shape flags: with --weights, where the tensors leave them open or to insist on them (a checkpoint
  // records its own).
  gpt::add_llama_shape_flags(app, f.llama);
  app.add_option("--prompt", f.prompt_text,
                 "a prompt as text: through --tokenizer, else bytes (a model trained with --text, vocab 256)");
  app.add_option("--tokenizer", f.tokenizer,
                 "the model's tokenizer (tokenizer.json, tokenizer.model or their directory): --prompt is encoded and "
                 "its generated tokens printed as text");
  app.add_option("--tokens", f.prompt_tokens, "a prompt as token ids, '3,17,42'; repeat for a batch")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--max-new-tokens", f.max_new_tokens, "tokens to generate per prompt")
      ->check(flags::positive_integer());
  app.add_option("--temperature", f.temperature, "0: greedy; above 0: sampling")->check(flags::non_negative_real());
  app.add_option("--top-k", f.top_k, "sample among the k most likely (0: all)")->check(flags::non_negative_integer());
  app.add_option("--top-p", f.top_p, "then among the fewest whose probabilities reach p")
      ->check(flags::real(0.0, true, 1.0, false));
  app.add_option("--seed", f.seed, "the sampling's seed")->check(flags::unsigned_integer());
  app.add_option("--stop", f.stop, "token ids that end a sequence (kept in its output)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(flags::integer(0, 65535));
  app.add_flag("--quiet", f.quiet, "only the generated tokens, no timing lines");
  app.add_option("--resident-layers", f.resident_layers,
                 "blocks kept in device memory, the first ones (default: all, or as many as --device-memory holds)")
      ->check(flags::integer(-1, 1 << 20));
  app.add_option("--device-memory", f.device_memory,
                 "device memory the decoder may hold, e.g. 2GiB: as many blocks resident as fit, the rest streamed");
  app.add_option("--weights-from", f.weights_from,
                 "where blocks that are not resident stream from: host (read once into host memory), disk (read "
                 "from the checkpoint or safetensors file every pass), or device (with --shard-weights: each rank's "
                 "part kept in device memory)")
      ->check(CLI::IsMember({"host", "disk", "device"}));
  app.add_option("--backend", f.backend,
                 "the device the decoder runs on: cpu (the default), cuda, or auto (CUDA when every rank on a node has "
                 "its own GPU)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--kv-in", f.kv_in,
                 "where the KV cache lives: device, or host (each layer's cached positions copied into device staging "
                 "ahead of its turn, --prefetch layers ahead, and the new ones copied back)")
      ->check(CLI::IsMember({"device", "host"}));
  app.add_flag("--shard-weights", f.shard_weights,
               "shard the streamed blocks over the data-parallel ranks (those of the same tp rank): each holds or "
               "reads one part and the group all-gathers every block before its turn (ZeRO-Inference); every block "
               "streams unless --resident-layers or --device-memory says otherwise");
  app.add_option("--prefetch", f.prefetch, "blocks streamed ahead of the one computing")->check(flags::integer(0, 8));
  app.add_option("--threads", f.threads,
                 "compute threads per rank on the CPU backend (default: the rank's share of the cores, less one per "
                 "stream copying weights in beside the compute; at most 4 per hardware thread of the machine, or 256 "
                 "on a smaller one)")
      ->check(flags::thread_count());
  app.add_option("--tp", f.tp, "tensor-parallel degree: heads split over groups of this many ranks")
      ->check(flags::positive_integer());
  CLI11_PARSE(app, argc, argv);
  return run_main([&] {
    Runtime rt(&argc, &argv, RuntimeOptions{f.backend});
    check_config_agreement(agreed_settings(f));  // before any rank acts on a setting the others lack
    report_stop_signals(rt.rank(), rt.world_size());
    const int rc = run(f, rt);
    rt.finish();
    return rc;
  });
}
