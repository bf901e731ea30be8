// bench_decode: the decode path's tokens/s and bytes read per generated token (models/gpt/inference) beside the
// bound for them, this machine's memory copy rate measured in the same run (a STREAM-style copy of a 2 GiB buffer on
// every core), at several batch sizes, for each weight placement: every block resident; every block streamed from
// host memory (bound: the copy into the slots, read and write, and the step's reads at the copy rate, or the streamed
// bytes at one thread's copy rate, the upload stream's, whichever is slower); every block
// streamed from a safetensors file with its page cache dropped before each block (bound: the file's cold read rate,
// measured in the same run); every block resident with the KV cache in host memory (host-kv; bound: its copies in
// and out counted as the streamed blocks' are). The default model's 0.8 GB of weights exceed the caches. Weights from
// the spec's init: a decode step's cost does not depend on their values. The decode computes on every core less the
// decoder's copy threads (strata-generate's choice), or on --threads. Usage: build/bin/bench_decode [--layers 16
// --embd 1024 --heads 16 --vocab 8192 --ctx 1024] [--prompt 64] [--steps 32] [--stream-steps 8] [--batches 1,4,16]
//        [--reps 2] [--placements resident,host,disk,host-kv] [--prefetch 1] [--threads N] [--dir /tmp]
#include <fcntl.h>
#include <omp.h>
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_device.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/host_memory.h"
#include "core/safetensors.h"
#include "core/tool_main.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel_table.h"
#include "models/gpt/data/token_data.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "runtime/sharding/shard_layout.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GB/s of a copy of `bytes` on every core (each thread its part), counting the bytes read and written as STREAM's
// copy does; the median of `reps` after one warm-up.
double copy_rate(std::size_t bytes, int reps) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel
    {
      const std::size_t n = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t lo = bytes * t / n, hi = bytes * (t + 1) / n;
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    }
    const double s = seconds_since(t0);
    if (r > 0) rates.push_back(2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  return median(rates);
}

// GB/s copied by one thread (bytes moved, not read + written), 50 MiB at a time from 16 sources into 2 destinations
// on a side stream of `dev`, as the upload stream copies streamed blocks into their slots: the host placement's link
// on the CPU backend, one copying thread as a GPU's link is one copy engine. The median of `reps` after one warm-up.
double one_thread_copy_rate(strata::Device& dev, int reps) {
  constexpr std::size_t kBlock = std::size_t{50} << 20;
  constexpr int kSources = 16;
  std::vector<std::vector<char>> src(kSources, std::vector<char>(kBlock, 1)), dst(2, std::vector<char>(kBlock, 0));
  const std::unique_ptr<strata::Stream> upload = dev.create_stream("link");
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    for (int b = 0; b < kSources; ++b)
      dev.copy(dst[static_cast<std::size_t>(b % 2)].data(), src[static_cast<std::size_t>(b)].data(), kBlock, *upload);
    upload->synchronize();
    const double s = seconds_since(t0);
    if (r > 0) rates.push_back(static_cast<double>(kSources) * kBlock / s / 1e9);
  }
  return median(rates);
}

// GB/s of weights read by the decode path's own product at one row (Kernels::matmul_forward, N = 1) over 0.8 GB
// of 1024 x 4096 matrices: what the step's largest part can reach on this machine, its products alone.
double one_row_product_rate(strata::Device& dev, int reps) {
  constexpr int IC = 1024, OC = 4096, kMatrices = 48;
  auto k = strata::make_kernels(dev);
  std::vector<std::vector<float>> w(kMatrices, std::vector<float>(static_cast<std::size_t>(IC) * OC, 1e-3f));
  std::vector<float> x(IC, 1.0f), y(OC);
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    for (const std::vector<float>& m : w) k->matmul_forward(y.data(), x.data(), m.data(), nullptr, 1, IC, OC);
    const double s = seconds_since(t0);
    if (r > 0) rates.push_back(static_cast<double>(kMatrices) * IC * OC * 4 / s / 1e9);
  }
  return median(rates);
}

// Drops `path`'s pages from the page cache (clean pages: POSIX_FADV_DONTNEED evicts them).
void drop_cached(int fd) { (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); }

// GB/s of a sequential read of `path` in 64 MiB pieces, its page cache dropped first; the median of `reps`.
double cold_read_rate(const std::string& path, int reps) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  STRATA_CHECK_CODE(strata::ErrorCode::kIo, fd >= 0, "cannot open {}", path);
  std::vector<char> buf(std::size_t{64} << 20);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    drop_cached(fd);
    std::uint64_t total = 0;
    const auto t0 = Clock::now();
    for (;;) {
      const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(total));
      if (n <= 0) break;
      total += static_cast<std::uint64_t>(n);
    }
    rates.push_back(static_cast<double>(total) / seconds_since(t0) / 1e9);
  }
  ::close(fd);
  return median(rates);
}

// The spec's init of every parameter written to one safetensors file (f32).
void write_weights(const strata::gpt::GptConfig& cfg, const strata::gpt::WeightReader& spec, const std::string& path) {
  strata::SafetensorsWriter w;
  std::vector<std::vector<float>> data;
  for (const strata::UnitSpec& u : strata::gpt::gpt_units(cfg, 1))
    for (const strata::SlotSpec& s : u.slots) {
      const std::size_t n = strata::shape_numel(s.shape);
      data.emplace_back(n);
      spec(s.name, 0, n, data.back().data());
      w.add_f32(s.name, strata::DType::kF32, s.shape, data.back().data());
    }
  w.write(path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_decode: decode tokens/s and bytes per token beside the memory bound"};
  namespace flags = strata::flags;
  // 16 layers of 1024: 0.8 GB of f32 weights, more than the last-level cache of the machines this runs on.
  strata::gpt::GptConfig cfg{16, 16, 1024, 8192, 1024};
  int prompt = 64, steps = 32, stream_steps = 8, reps = 2, prefetch = 1, threads = 0;
  std::vector<int> batches{1, 4, 16};
  std::vector<std::string> placements{"resident", "host", "disk", "host-kv"};
  std::string dir = std::filesystem::temp_directory_path().string();
  app.add_option("--layers", cfg.layers)->check(flags::positive_integer());
  app.add_option("--heads", cfg.heads)->check(flags::positive_integer());
  app.add_option("--embd", cfg.embd)->check(flags::positive_integer());
  app.add_option("--vocab", cfg.vocab)->check(flags::integer(2, 65536));
  app.add_option("--ctx", cfg.ctx)->check(flags::positive_integer());
  app.add_option("--prompt", prompt, "prompt tokens per sequence")->check(flags::positive_integer());
  app.add_option("--steps", steps, "decode steps timed")->check(flags::positive_integer());
  app.add_option("--batches", batches, "sequences decoded together, comma list")
      ->delimiter(',')
      ->check(flags::positive_integer());
  app.add_option("--reps", reps, "timed repetitions (the median is printed)")->check(flags::positive_integer());
  app.add_option("--stream-steps", stream_steps, "decode steps timed when blocks stream")
      ->check(flags::positive_integer());
  app.add_option("--placements", placements,
                 "resident, host (every block streamed from host memory), disk, host-kv (resident, the KV cache in "
                 "host memory)")
      ->delimiter(',')
      ->check(CLI::IsMember({"resident", "host", "disk", "host-kv"}));
  app.add_option("--prefetch", prefetch, "blocks streamed ahead")->check(flags::integer(0, 8));
  app.add_option("--threads", threads,
                 "compute threads (default: every core less the decoder's copy threads, as strata-generate)")
      ->check(flags::thread_count());
  app.add_option("--dir", dir, "where the disk placement's safetensors file is written (and removed)")
      ->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);
  return strata::run_tool("bench_decode", [&]() -> int {
    using namespace strata;
    cfg.validate();
    STRATA_CHECK(prompt + steps < cfg.ctx, "--prompt {} + --steps {} must stay below --ctx {}", prompt, steps, cfg.ctx);
    const std::size_t buffer = std::size_t{2} << 30;  // past any last-level cache
    // What the run cannot do is refused before seconds of measurement: the disk placement's file (written where
    // --dir says), and memory for the copy buffers and the weights (the disk placement writes a second copy).
    const bool on_disk = std::find(placements.begin(), placements.end(), "disk") != placements.end();
    const std::string file = dir + "/bench_decode_weights.safetensors";
    if (on_disk) check_output_file(file, "--dir's weights file", OutputKind::kReplaced);
    double weight_bytes = 0;
    for (const UnitSpec& u : gpt::gpt_units(cfg, 1))
      for (const SlotSpec& s : u.slots) weight_bytes += 4.0 * static_cast<double>(shape_numel(s.shape));
    const double needed = 2.0 * static_cast<double>(buffer) + weight_bytes * (on_disk ? 2 : 1);
    check_host_allocation(
        needed < 1.8e19 ? static_cast<std::uint64_t>(needed) : ~std::uint64_t{0}, 0,
        fmt::format("bench_decode: two {} copy buffers and the model's {} of f32 weights{}", bytes_text(buffer),
                    bytes_text(static_cast<std::uint64_t>(std::min(weight_bytes, 1.8e19))),
                    on_disk ? " (twice: the disk placement writes them out)" : ""));
    CpuDevice dev(600.0);
    const double bw = copy_rate(buffer, 5), product = one_row_product_rate(dev, 3);
    const bool streams_from_host = std::find(placements.begin(), placements.end(), "host") != placements.end();
    const double link = streams_from_host ? one_thread_copy_rate(dev, 3) : 0;
    std::printf(
        "# bench_decode: %d layers, embd %d, %d heads, vocab %d, ctx %d, f32; prompt %d, %d decode steps, "
        "%d cores\n",
        cfg.layers, cfg.embd, cfg.heads, cfg.vocab, cfg.ctx, prompt, steps, omp_get_max_threads());
    std::printf(
        "# memory copy (every core, 2 GiB, read + write counted, as STREAM): %.2f GB/s; the decode's product "
        "at one row reads %.2f GB/s of weights (0.8 GB of 1024 x 4096 f32)\n",
        bw, product);
    if (streams_from_host)
      std::printf("# host: one thread copies %.2f GB/s (50 MiB blocks, bytes moved), the upload stream's link\n", link);
    const gpt::WeightReader spec = [&](const std::string& name, std::size_t begin, std::size_t count, float* out) {
      ParamSlot slot;
      slot.name = name;
      gpt::spec_init(cfg, slot, begin, count, out, 1);
    };
    // The disk placement's file, its cold read rate, and a reader that drops its page cache before each block.
    std::shared_ptr<SafetensorsReader> reader;
    int fd = -1;
    double disk_gbs = 0;
    if (on_disk) {
      write_weights(cfg, spec, file);
      disk_gbs = cold_read_rate(file, 3);
      reader = std::make_shared<SafetensorsReader>(file);
      fd = ::open(file.c_str(), O_RDONLY);
      std::printf("# disk: %s, read cold (page cache dropped) at %.2f GB/s\n", file.c_str(), disk_gbs);
    }
    const gpt::WeightReader from_disk = [&](const std::string& name, std::size_t begin, std::size_t count,
                                            float* out) {
      if (name.size() > 12 && name.compare(name.size() - 12, 12, ".ln_1.weight") == 0) drop_cached(fd);
      reader->read_f32(name, begin, count, out);
    };
    std::printf("# %8s %5s %7s %11s %9s %13s %13s %9s %11s %8s %10s\n", "weights", "batch", "threads", "tokens/s",
                "ms/token", "bytes/token", "streamed/tok", "GB/s read", "bound tok/s", "of bound", "of product");
    const int cores = omp_get_max_threads();
    for (const std::string& where : placements)
      for (int b : batches) {
        STRATA_CHECK(b >= 1, "--batches: {} is not a batch size", b);
        gpt::DecodePlacement placement;
        placement.kv_on_host = where == "host-kv";
        placement.prefetch_depth = prefetch;
        if (where == "host" || where == "disk") {
          placement.resident_layers = 0;
          placement.source = where == "disk" ? WeightSource::kDisk : WeightSource::kHost;
        }
        gpt::GptDecoder dec(cfg, dev, b, where == "disk" ? from_disk : spec, decode_pass_rows(b), DType::kF32,
                            placement);
        const int n_steps = where == "host" || where == "disk" ? stream_steps : steps;
        cpu::set_num_threads(threads > 0 ? threads : compute_threads(cores, dec));
        std::vector<double> times;
        std::uint64_t bytes = 0, streamed = 0;
        for (int r = 0; r <= reps; ++r) {
          std::vector<int> seqs;
          std::vector<std::int32_t> next;
          for (int s = 0; s < b; ++s) {
            std::vector<std::int32_t> p;
            for (std::uint16_t t :
                 gpt::synthetic_tokens(static_cast<std::uint64_t>(prompt), cfg.vocab, static_cast<std::uint64_t>(s)))
              p.push_back(t);
            dec.reset(s);
            dec.prefill(s, p.data(), prompt);
            seqs.push_back(s);
            next.push_back(p.back());
          }
          const std::uint64_t before = dec.weight_bytes_read() + dec.cache_bytes_read();
          const std::uint64_t streamed_before = dec.streamed_bytes_read() + dec.cache_link_bytes();
          const auto t0 = Clock::now();
          for (int i = 0; i < n_steps; ++i) dec.decode(seqs, next);
          const double s = seconds_since(t0);
          if (r > 0) times.push_back(s);  // one warm-up
          bytes = dec.weight_bytes_read() + dec.cache_bytes_read() - before;
          streamed = dec.streamed_bytes_read() + dec.cache_link_bytes() - streamed_before;
        }
        const double t = median(times), tokens = static_cast<double>(b) * n_steps;
        const double per_token = static_cast<double>(bytes) / tokens;
        const double streamed_per_token = static_cast<double>(streamed) / tokens;
        // Seconds a token at the bound: the memory traffic at the copy rate (a streamed block is copied, read and
        // written, then read), or the file's cold read, whichever is slower.
        double bound_s = (per_token + 2 * streamed_per_token) / (bw * 1e9);
        if (where == "disk") bound_s = std::max(bound_s, streamed_per_token / (disk_gbs * 1e9));
        if (where == "host") bound_s = std::max(bound_s, streamed_per_token / (link * 1e9));
        const double bound = 1 / bound_s;
        const double read = static_cast<double>(bytes) / t / 1e9;
        std::printf("  %8s %5d %7d %11.1f %9.3f %13.0f %13.0f %9.2f %11.1f %8.2f %10.2f\n", where.c_str(), b,
                    cpu::num_threads(), tokens / t, 1e3 * t / tokens, per_token, streamed_per_token, read, bound,
                    tokens / t / bound, read / product);
        cpu::set_num_threads(cores);
      }
    if (fd >= 0) ::close(fd);
    if (reader) std::filesystem::remove(file);
    std::printf(
        "# bytes/token: read by the step, the weights once over the batch and each sequence's cached keys and values; "
        "streamed/tok: copied into the stream slots (host-kv: the cache's copies in and out); bound: those bytes at "
        "the copy rate (a streamed byte counted three times: read, written, read again), or the cold file read for "
        "disk, or one thread's copy for host, whichever is slower; of product: GB/s read over the one-row product's\n");
    return 0;
  });
}
