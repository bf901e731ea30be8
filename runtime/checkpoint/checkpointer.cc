// Checkpointer: staging, the per-rank file, the agreed commit, pruning, and the range-reading load.
#include "runtime/checkpoint/checkpointer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>

#include "collectives/rank_values.h"
#include "core/device_registry.h"
#include "core/error.h"
#include "core/json_schema.h"
#include "core/logging.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/checkpoint_values.h"
#include "runtime/checkpoint/chunk_file.h"
#include "runtime/checkpoint/slice_chunk.h"
#include "runtime/checkpoint/storage_view.h"
#include "runtime/optim/nonfinite.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A rank's sidecar (Checkpointer::write, sent to rank 0 at the commit): its file's size and its chunk records, by
// tensor.
const JsonSchema& sidecar_schema() {
  using S = JsonSchema;
  const S count = S::integer(0, std::uint64_t{1} << 62);
  const S shape = S::array(S::integer(0, std::uint64_t{1} << 40), 8);
  const S chunk = S::object({required("offset", count), required("box_offset", shape), required("box_shape", shape),
                             required("begin", count), required("count", count),
                             required("crc32", S::array(S::integer(0, UINT32_MAX)))});
  static const S s = S::object({required("file", S::string(4096)), required("bytes", count),
                                required("tensors", S::map(S::array(chunk)))});
  return s;
}

nlohmann::json chunk_json(const ChunkRecord& c) {
  return {{"offset", c.offset}, {"box_offset", c.box_offset}, {"box_shape", c.box_shape},
          {"begin", c.begin},   {"count", c.count},           {"crc32", c.crc32}};
}

}  // namespace

void CheckpointOptions::validate() const {
  STRATA_CHECK(!dir.empty(), "a checkpoint needs a directory");
  STRATA_CHECK(keep >= 1, "keep {} checkpoints: at least 1", keep);
  STRATA_CHECK(block_bytes >= 4096 && block_bytes % 4 == 0, "checkpoint block of {} bytes: at least 4096, a multiple "
               "of 4", block_bytes);
}

// One save: this rank's pieces (a run of one box of one tensor each) in host memory, and what writing them gave.
struct Checkpointer::Staged {
  struct Source {
    const float* data = nullptr;  // host memory: the live state (synchronous save of host state) or `staging`
    std::size_t count = 0;
  };
  struct Piece {
    std::string tensor;
    std::vector<std::int64_t> box_offset, box_shape;
    std::uint64_t begin = 0, count = 0;
    std::vector<Source> sources;  // the piece's values are these, one after the other (several: a strided tp box)
    ChunkRecord chunk;            // filled by write()
  };
  std::int64_t step = 0;
  nlohmann::json state;  // the optimizer's and the trainer's
  std::vector<Piece> pieces;
  Buffer staging;
  Buffer gather;  // one block, where a piece of several sources is put together on its way to the file
  std::string tmp_dir;
  std::string error;  // a failure of write(), reported at the commit
  std::string sidecar;  // what rank 0 needs for the index: this rank's file size and chunk records (JSON; "" for none)
  std::uint64_t bytes = 0;
  double write_ms = 0;
};

Checkpointer::Checkpointer(ShardedModel& model, OptimizerState& optimizer, Communicator& world,
                           CheckpointOptions options)
    : Checkpointer(model, optimizer, world, 0, 1, std::move(options)) {}

Checkpointer::Checkpointer(ShardedModel& model, OptimizerState& optimizer, DeviceMesh& mesh, CheckpointOptions options)
    : Checkpointer(model, optimizer, mesh.world(), mesh.tp().rank(), mesh.tp().size(), std::move(options)) {}

Checkpointer::Checkpointer(ShardedModel& model, OptimizerState& optimizer, DeviceMesh& mesh, CheckpointOptions options,
                           CheckpointPart part)
    : Checkpointer(model, optimizer, mesh.world(), mesh.tp().rank(), mesh.tp().size(), std::move(options)) {
  for (int u : part.copies)
    STRATA_CHECK(u >= 0 && u < model_.num_units(), "checkpoint part: copied unit {} of {}", u, model_.num_units());
  part.pp = mesh.pp().size();
  if (part.whole.empty()) part.whole = model_.resources().declaration();
  part_ = std::move(part);
}

Checkpointer::Checkpointer(ShardedModel& model, OptimizerState& optimizer, Communicator& world, int tp_rank,
                           int tp_size, CheckpointOptions options)
    : model_(model),
      optimizer_(optimizer),
      world_(world),
      tp_rank_(tp_rank),
      tp_size_(tp_size),
      options_(std::move(options)),
      dir_(options_.dir) {
  options_.validate();
  part_.whole = model_.resources().declaration();
  // A slice saved at the wrong degree would land at wrong global places: the slot shapes must be this degree's.
  for (const UnitSpec& u : model_.resources().declaration())
    for (const SlotSpec& s : u.slots)
      STRATA_CHECK(s.tp.replicated() || s.shape == s.tp.local_shape(tp_size_),
                   "checkpoints of unit '{}': slot '{}' ({}) has shape {}, not its slice at tensor-parallel degree {} "
                   "({}): give the Checkpointer the mesh the model was split over",
                   u.name, s.name, s.tp.describe(), shape_string(s.shape), tp_size_,
                   shape_string(s.tp.local_shape(tp_size_)));
  // Staging is host memory in a ledger: the device's own on the CPU backend (its memory is host memory), else a
  // page-locked host device of the checkpointer's.
  Device& device = model_.resources().device();
  if (device.kind() != DeviceKind::kCpu) staging_device_ = create_host_device(device);
  // Which ranks see the same files there: one group on a shared file system, one per host where each host has its own
  // disk. Each group's first rank commits the group's copy of every save.
  storage_ = probe_storage(world_, options_.dir);
  if (world_.rank() == 0 && !storage_.shared())
    logger("ckpt").info("checkpoints in {}: {}; each group's first rank commits the index there, so a resume at this "
                        "layout on these hosts finds its files (elsewhere: strata-ckpt assemble first)",
                        options_.dir, storage_.describe());
  // One job owns a directory: two would replace and prune each other's checkpoints, both exiting 0.
  std::string error;
  if (storage_.leads(world_.rank())) {
    try {
      lock_ = DirLock::acquire(options_.dir, "checkpoint directory", "");
      if (!lock_.takeover().empty()) logger("ckpt").warn("{}", lock_.takeover());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // One group: rank 0 alone could fail, and every rank says what it said.
  if (storage_.shared())
    agree_with_root(world_, 0, error.empty(), error);
  else
    all_agree(world_, error.empty(), error, fmt::format("taking the checkpoint directory {}", options_.dir));
}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
}

std::unique_ptr<Checkpointer::Staged> Checkpointer::stage(std::int64_t step) {
  ShardedParameters& params = model_.parameters();
  params.stream().synchronize();  // the last update has landed in the master and the moments
  auto s = std::make_unique<Staged>();
  s->step = step;
  s->tmp_dir = dir_.tmp_path(step);
  const std::vector<std::string> state_names = optimizer_.tensor_names();
  for (int u = 0; u < params.num_units(); ++u) {
    if (std::find(part_.copies.begin(), part_.copies.end(), u) != part_.copies.end()) continue;  // another stage's
    const UnitShard shard = params.unit(u);
    // The master, then the optimizer's tensors.
    std::vector<const float*> sources = {shard.master};
    for (std::size_t k = 0; k < state_names.size(); ++k) sources.push_back(optimizer_.tensor_shard(k, u));
    for (const ShardSegment& seg : params.owned_segments(u)) {
      const ParamSlot& slot = shard.layout->slots()[seg.slot];
      if (slot.tp.replicated() && tp_rank_ != 0) continue;  // every tp rank holds it: the first saves it
      std::vector<std::string> names = {params_tensor(slot.name)};
      for (const std::string& t : state_names) names.push_back(optimizer_tensor(t, slot.name));
      // The segment as flat ranges of the boxes of this rank's slice (the whole tensor without tp), but for the
      // pieces an earlier tp rank holds too (shared key-value heads): that rank saves them.
      const std::vector<SliceChunk> chunks =
          slice_chunks(slot.tp, slot.shape, tp_rank_, tp_size_, seg.slot_begin, seg.length, /*owned_only=*/true);
      for (std::size_t k = 0; k < (slot.trainable ? names.size() : 1); ++k)
        for (const SliceChunk& c : chunks) {
          Staged::Piece p{names[k], c.box_offset, c.box_shape, c.begin, c.count, {}, {}};
          for (const LocalRun& r : c.local)
            p.sources.push_back(Staged::Source{sources[k] + seg.shard_begin + (r.begin - seg.slot_begin), r.length});
          s->pieces.push_back(std::move(p));
        }
    }
  }
  // A copy in host staging when training goes on meanwhile or the state is not host memory: each piece's sources put
  // together there.
  Device& state = params.device();
  Device& host = staging_device_ ? *staging_device_ : model_.resources().device();
  if (options_.async || state.kind() != DeviceKind::kCpu) {
    std::uint64_t total = 0;
    for (const Staged::Piece& p : s->pieces) total += p.count * 4;
    s->staging = host.allocate(total, MemCategory::kCheckpoint);
    float* at = s->staging.as<float>();
    for (Staged::Piece& p : s->pieces) {
      float* first = at;
      for (const Staged::Source& src : p.sources) {
        if (state.kind() == DeviceKind::kCpu) std::memcpy(at, src.data, src.count * 4);
        else state.copy_to_host(at, src.data, src.count * 4);
        at += src.count;
      }
      p.sources = {Staged::Source{first, p.count}};
    }
  } else if (std::any_of(s->pieces.begin(), s->pieces.end(),
                         [](const Staged::Piece& p) { return p.sources.size() > 1; })) {
    s->gather = host.allocate(options_.block_bytes, MemCategory::kCheckpoint);
  }
  return s;
}

void Checkpointer::write(Staged& s) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!s.pieces.empty()) {
      ChunkWriter file(s.tmp_dir + "/" + CheckpointDir::rank_file(world_.rank()), options_.block_bytes);
      for (Staged::Piece& p : s.pieces) {
        ChunkRecord& c = p.chunk;
        c.box_offset = p.box_offset;
        c.box_shape = p.box_shape;
        c.begin = p.begin;
        c.count = p.count;
        if (p.sources.size() == 1) {
          c.offset = file.append(p.sources[0].data, p.count * 4, c.crc32);
          continue;
        }
        // Several sources: whole blocks put together in `gather`, appended one by one (so their checksums, in order,
        // are the chunk's).
        const std::size_t block = options_.block_bytes / 4;
        float* g = s.gather.as<float>();
        std::size_t filled = 0;
        bool first = true;
        auto flush = [&] {
          std::vector<std::uint32_t> crc;
          const std::uint64_t at = file.append(g, filled * 4, crc);
          if (first) c.offset = at;
          first = false;
          c.crc32.insert(c.crc32.end(), crc.begin(), crc.end());
          filled = 0;
        };
        for (const Staged::Source& src : p.sources)
          for (std::size_t done = 0; done < src.count;) {
            const std::size_t n = std::min(src.count - done, block - filled);
            std::memcpy(g + filled, src.data + done, n * 4);
            filled += n;
            done += n;
            if (filled == block) flush();
          }
        if (filled > 0) flush();
      }
      file.finish();
      s.bytes = file.bytes();
      // What rank 0 needs for the index: this file's size and its chunks, sent to it at the commit.
      nlohmann::json sidecar = {{"file", CheckpointDir::rank_file(world_.rank())}, {"bytes", s.bytes}};
      nlohmann::json& tensors = sidecar["tensors"] = nlohmann::json::object();
      for (const Staged::Piece& p : s.pieces) tensors[p.tensor].push_back(chunk_json(p.chunk));
      s.sidecar = sidecar.dump();
    }
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  s.write_ms = ms_since(t0);
}

void Checkpointer::agree(bool ok, const std::string& error, const std::string& what, bool intact_note) {
  try {
    all_agree(world_, ok, error, what);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kRemote || !intact_note) throw;
    const std::int64_t previous = dir_.latest_step();
    throw Error(ErrorCode::kRemote,
                std::string(e.what()) + "; " +
                    (previous >= 0 ? fmt::format("the last committed checkpoint, {}, is intact", dir_.step_path(previous))
                                   : std::string("there is no committed checkpoint")));
  }
}

void Checkpointer::save(std::int64_t step, const nlohmann::json& trainer_state) {
  const auto t0 = std::chrono::steady_clock::now();
  wait();  // the previous save in flight, if any
  {
    // Never a checkpoint of non-finite weights: checked before anything is written.
    ShardedParameters& params = model_.parameters();
    params.stream().synchronize();
    const NonFiniteAt bad = lowest_over_ranks(world_, find_nonfinite(params, ShardValues::kMaster, true));
    if (bad.found()) {
      const std::int64_t previous = dir_.latest_step();
      STRATA_THROW(ErrorCode::kNonFinite, "not saving checkpoint {}: the weights are not finite: {} (the first such "
                   "place on any rank); {}", dir_.step_path(step), describe_nonfinite(params, bad),
                   previous >= 0 ? fmt::format("the last committed checkpoint, {}, is intact", dir_.step_path(previous))
                                 : std::string("there is no committed checkpoint"));
    }
  }
  // Each storage group's first rank makes an empty step-N.tmp (a crash may have left one); the others write into it once
  // it exists.
  std::string error;
  if (storage_.leads(world_.rank())) {
    try {
      dir_.create();
      std::error_code ec;
      fs::remove_all(dir_.tmp_path(step), ec);
      fs::create_directory(dir_.tmp_path(step), ec);
      STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "cannot create {}: {}", dir_.tmp_path(step), ec.message());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error.empty(), error, fmt::format("checkpoint of step {}", step), true);
  std::unique_ptr<Staged> s = stage(step);
  nlohmann::json optimizer = optimizer_.state();
  optimizer["name"] = optimizer_.kind();
  optimizer["tensors"] = optimizer_.tensor_names();
  s->state = {{"optimizer", std::move(optimizer)}, {"trainer", trainer_state}};
  last_ = SaveStats{};
  last_.step = step;
  if (options_.async) {
    written_ = false;
    in_flight_ = std::move(s);
    Staged* staged = in_flight_.get();
    writer_ = std::thread([this, staged] {
      write(*staged);
      written_ = true;
    });
    last_.stall_ms = ms_since(t0);
    return;
  }
  write(*s);
  commit(*s);
  last_.stall_ms = ms_since(t0);
}

void Checkpointer::poll() {
  if (!in_flight_) return;
  const std::vector<double> done = all_gather_values(world_, written_ ? 1.0 : 0.0);
  if (std::all_of(done.begin(), done.end(), [](double d) { return d != 0; })) {
    const auto t0 = std::chrono::steady_clock::now();
    wait();
    last_.stall_ms += ms_since(t0);
  }
}

void Checkpointer::wait() {
  if (!in_flight_) return;
  if (writer_.joinable()) writer_.join();
  std::unique_ptr<Staged> s = std::move(in_flight_);
  commit(*s);
}

void Checkpointer::commit(Staged& s) {
  last_.write_ms = s.write_ms;
  last_.bytes = s.bytes;
  const std::string what = fmt::format("checkpoint of step {} in {}", s.step, dir_.path());
  agree(s.error.empty(), s.error, what, true);
  const std::vector<std::string> sidecars = gather_texts(world_, s.sidecar, 0);
  std::string error, text;
  if (world_.rank() == 0) {
    try {
      // The index: every writer's sidecar, in rank order, merged.
      CheckpointIndex index;
      index.step = s.step;
      index.world_size = world_.size();
      index.units = global_declaration(part_.whole);
      index.block_bytes = options_.block_bytes;
      const DataParallelGroups& g = model_.resources().groups();
      const ShardingOptions& o = model_.resources().options();
      index.layout = {
          {"mesh", {{"pp", part_.pp}, {"dp_replicate", g.replicate->size()}, {"dp_shard", g.shard->size()},
                    {"tp", tp_size_}}},
          {"zero_stage", static_cast<int>(o.stage)},
          {"param_dtype", dtype_name(o.mixed_precision.param_dtype)},
          {"reduce_dtype", dtype_name(o.mixed_precision.reduce_dtype)},
          {"offload", offload_name(o.offload)}};
      index.state = s.state;
      std::map<std::string, TensorRecord> tensors;
      const std::vector<std::string> state_names = optimizer_.tensor_names();
      for (const UnitSpec& u : index.units)
        for (const SlotSpec& slot : u.slots) {
          tensors[params_tensor(slot.name)] = TensorRecord{params_tensor(slot.name), slot.shape, DType::kF32, {}};
          if (!slot.trainable) continue;
          for (const std::string& t : state_names) {
            const std::string name = optimizer_tensor(t, slot.name);
            tensors[name] = TensorRecord{name, slot.shape, DType::kF32, {}};
          }
        }
      for (int r = 0; r < world_.size(); ++r) {
        if (sidecars[static_cast<std::size_t>(r)].empty()) continue;  // a rank that owns no elements writes nothing
        // Sent by a rank of this save, but read as any JSON is: through the schema check, naming the field.
        const std::string origin = fmt::format("checkpoint records of rank {} for {}", r, s.tmp_dir);
        const nlohmann::json side = parse_json(sidecars[static_cast<std::size_t>(r)], origin, ErrorCode::kIo);
        sidecar_schema().check(side, origin, ErrorCode::kIo);
        const int file = static_cast<int>(index.files.size());
        index.files.push_back(FileRecord{side["file"].get<std::string>(), side["bytes"].get<std::uint64_t>()});
        for (const auto& [name, chunks] : side["tensors"].items()) {
          auto t = tensors.find(name);
          STRATA_CHECK_CODE(ErrorCode::kIo, t != tensors.end(), "{}: tensor '{}' is not one of the model's", origin,
                            name);
          for (const nlohmann::json& c : chunks)
            t->second.chunks.push_back(ChunkRecord{file, c["offset"], c["box_offset"], c["box_shape"], c["begin"],
                                                   c["count"], c["crc32"]});
        }
      }
      // In box order, as a parse leaves them.
      for (auto& [name, t] : tensors) std::sort(t.chunks.begin(), t.chunks.end(), chunk_before);
      index.tensors = std::move(tensors);
      const std::string problem = index.coverage_problem();
      STRATA_CHECK_CODE(ErrorCode::kInternal, problem.empty(), "{}: {}", what, problem);
      text = index.serialize();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error.empty(), error, what, true);
  // Every storage group's first rank commits the same index into its group's copy of the directory.
  if (!storage_.shared()) text = broadcast_text(world_, text, 0, std::string::npos);
  if (storage_.leads(world_.rank())) {
    try {
      dir_.commit(CheckpointIndex::parse(text, dir_.tmp_path(s.step) + "/index.json"));
      dir_.prune(options_.keep, s.step);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error.empty(), error, what, true);
  last_.committed = true;
  logger("ckpt").info("{} committed: {:.1f} MB on this rank, written in {:.0f} ms", what,
                      static_cast<double>(s.bytes) / 1e6, s.write_ms);
}

nlohmann::json Checkpointer::load(std::int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  if (step < 0) step = dir_.latest_step();
  STRATA_CHECK_CODE(ErrorCode::kIo, step >= 0, "no committed checkpoint in {}", dir_.path());
  // Every rank reads the same index and makes the same checks: a bad one is the same error on every rank.
  const CheckpointIndex index = dir_.read_index(step);
  const std::string where = dir_.step_path(step);
  index.check_model(global_declaration(part_.whole), where);
  if (world_.rank() == 0) {
    if (!index.checksummed)
      logger("ckpt").warn("{}/index.json carries no checksum of its own (written by a Strata from before index "
                          "checksums): loaded, its fields checked for type and range only",
                          where);
    for (const std::string& f : index.unknown_fields)
      logger("ckpt").warn("{}/index.json: field {} is not one this Strata knows (a newer writer's?): ignored", where,
                          f);
  }
  const nlohmann::json& opt = index.state.value("optimizer", nlohmann::json::object());
  const std::int64_t optimizer_step = opt.value("step", -1);
  // Another optimizer's state would load as this one's (a momentum as a first moment): refused, naming both.
  const std::vector<std::string> state_names = optimizer_.tensor_names();
  const std::string saved_kind = saved_optimizer_kind(opt);
  const std::vector<std::string> saved_names = saved_optimizer_tensors(opt);
  auto listed = [](const std::vector<std::string>& names) {
    return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
  };
  STRATA_CHECK(saved_kind.empty() || (saved_kind == optimizer_.kind() && saved_names == state_names),
               "{} holds the state of optimizer '{}' (per-element tensors: {}); this run's optimizer is '{}' ({}): "
               "resume with the optimizer it was saved with",
               where, saved_kind, listed(saved_names), optimizer_.kind(), listed(state_names));

  ShardedParameters& params = model_.parameters();
  Device& state = params.device();
  Device& host = staging_device_ ? *staging_device_ : model_.resources().device();
  // Two bounded staging blocks: whole blocks as read (checksummed), and values on their way to device memory.
  Buffer block = host.allocate(index.block_bytes, MemCategory::kCheckpoint);
  Buffer values = state.kind() == DeviceKind::kCpu ? Buffer() : host.allocate(index.block_bytes, MemCategory::kCheckpoint);
  CheckpointReader reader(where, index, block.data());
  const bool host_state = state.kind() == DeviceKind::kCpu;
  // Tensor `name`'s values of segment `seg` of `slot` into the state memory at `dst` (host memory directly, device
  // memory a staging block at a time). The segment's local elements are runs of the global tensor (several for a tp
  // slice, read together in file order whatever tp saved them); a slice's padding has no global place and is 0.
  auto read_into = [&](const std::string& name, const ParamSlot& slot, const ShardSegment& seg, float* dst) {
    const TensorRecord& t = index.tensor(name);
    struct GlobalRun {
      std::uint64_t local, global, count;  // local: from the segment's start
    };
    std::vector<GlobalRun> runs;
    for_each_global_run(slot.tp, tp_rank_, tp_size_, seg.slot_begin, seg.length,
                        [&](std::size_t local, std::size_t global, std::size_t n) {
                          runs.push_back(GlobalRun{local - seg.slot_begin, global, n});
                        });
    const std::uint64_t window = host_state ? seg.length : index.block_bytes / 4;
    std::size_t r = 0;       // the run under way
    std::uint64_t used = 0;  // of its elements, read already
    for (std::uint64_t w = 0; w < seg.length; w += window) {
      const std::uint64_t wn = std::min<std::uint64_t>(window, seg.length - w);
      float* out = host_state ? dst + w : values.as<float>();
      std::vector<CheckpointReader::Run> batch;
      std::uint64_t covered = 0;
      for (; r < runs.size() && runs[r].local + used < w + wn;) {
        const std::uint64_t at = runs[r].local + used, n = std::min(runs[r].count - used, w + wn - at);
        batch.push_back(CheckpointReader::Run{runs[r].global + used, n, out + (at - w)});
        covered += n;
        used += n;
        if (used == runs[r].count) {
          ++r;
          used = 0;
        }
      }
      if (covered < wn) std::fill(out, out + wn, 0.0f);  // padding among the runs, which overwrite the rest
      reader.read_f32(t, batch);
      // Values with valid checksums can still be impossible (a NaN moment, a negative second moment): refused here,
      // before a step could turn them into advice to lower the learning rate. The masters are checked below, over
      // every rank at once.
      if (name != params_tensor(slot.name))
        for (const CheckpointReader::Run& run : batch) {
          const std::size_t bad = first_bad_value(name, run.out, run.count);
          STRATA_CHECK_CODE(ErrorCode::kNonFinite, bad == run.count,
                            "loading {}: {}; the checkpoint's checksums match, so it was written so (a run that "
                            "diverged, or an edited file): resume from another checkpoint",
                            where, describe_bad_value(name, run.begin + bad, run.out[bad]));
        }
      if (!host_state) state.copy_from_host(dst + w, values.data(), wn * 4);
    }
  };
  std::string error;
  try {
    params.wait_for_grads();
    for (int u = 0; u < params.num_units(); ++u) {
      params.begin_update(u);
      const UnitShard shard = params.unit(u);
      for (const ShardSegment& seg : shard.segments) {
        const ParamSlot& slot = shard.layout->slots()[seg.slot];
        read_into(params_tensor(slot.name), slot, seg, shard.master + seg.shard_begin);
        if (!slot.trainable) continue;
        for (std::size_t k = 0; k < state_names.size(); ++k) {
          const std::string name = optimizer_tensor(state_names[k], slot.name);
          float* dst = optimizer_.tensor_shard(k, u) + seg.shard_begin;
          if (index.has_tensor(name)) {
            read_into(name, slot, seg, dst);
          } else {
            // Weights alone (strata-ckpt import): the optimizer starts from zeros, and only at step 0.
            STRATA_CHECK_CODE(ErrorCode::kIo, optimizer_step <= 0, "{}: tensor '{}' is missing", where, name);
            state.fill_zero(dst, seg.length * 4, params.stream());
          }
        }
      }
    }
    params.stream().synchronize();
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(error.empty(), error, fmt::format("loading {}", where), false);
  // Weights that are not finite would train to nothing: refused, as train_gpt --init refuses them.
  const NonFiniteAt bad = lowest_over_ranks(world_, find_nonfinite(params, ShardValues::kMaster, false));
  STRATA_CHECK_CODE(ErrorCode::kNonFinite, !bad.found(), "loading {}: its weights are not finite: {} (the first such "
                    "place on any rank)", where, describe_nonfinite(params, bad));
  for (int u = 0; u < params.num_units(); ++u) params.end_update(u);
  if (optimizer_step > 0 || opt.contains("name")) optimizer_.restore(opt);
  params.finish_step(optimizer_.steps_taken(), true);
  last_load_ = LoadStats{step, ms_since(t0), reader.bytes_read()};
  const nlohmann::json saved_tp = index.layout.value("mesh", nlohmann::json::object()).value("tp", nlohmann::json(1));
  logger("ckpt").info(
      "loaded {} (step {}, saved at {} ranks, tp {}) into {} ranks, tp {}: {:.1f} MB read on this rank in {:.0f} ms",
      where, step, index.world_size, saved_tp.dump(), world_.size(), tp_size_,
      static_cast<double>(last_load_.bytes) / 1e6, last_load_.ms);
  return index.state.value("trainer", nlohmann::json::object());
}

}  // namespace strata
