// Non-finite weights are never written (train_gpt --save, checkpoints) and strict --init loading sets aside only
// Hugging Face's buffers: the paths train_gpt cannot reach once its update and load checks stop a run first, driven
// here through GptTrainer (CPU backend, np 1 and 2, the tiny reference model).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "models/gpt/training/gpt_trainer.h"
#include "core/safetensors.h"
#include "runtime/optim/nonfinite.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;

// A directory every rank shares: temp/strata_nonfinite_<rank 0's pid>, made by rank 0 and removed at the end.
class SharedDir {
 public:
  SharedDir() {
    int root_pid = ::getpid();
    MPI_Bcast(&root_pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path_ = (std::filesystem::temp_directory_path() / fmt::format("strata_nonfinite_{}", root_pid)).string();
    if (runtime().rank() == 0) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (runtime().rank() == 0) std::filesystem::remove_all(path_, ec);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

TrainConfig tiny_config() {
  return test::reference_config(test::load_json(test::data_dir() + "gpt_tiny_ref.json"), runtime().world_size());
}

TokenFile tiny_data(const TrainConfig& cfg) {
  return TokenFile::open(test::data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Writes NaN into the last rank's master: the last element of the last unit's shard that belongs to a slot.
// Returns the slot's name on every rank.
std::string poison_last_rank(GptTrainer& t) {
  ShardedParameters& p = t.model().parameters();
  const int u = p.num_units() - 1;
  const UnitShard shard = p.unit(u);
  std::string name;
  if (runtime().rank() == runtime().world_size() - 1 && !shard.segments.empty()) {
    const ShardSegment& seg = shard.segments.back();
    shard.master[seg.shard_begin + seg.length - 1] = NAN;
    name = shard.layout->slots()[seg.slot].name;
  }
  // Every rank learns the name (the last rank's is the longest: the others send an empty one).
  char buf[128] = {};
  std::snprintf(buf, sizeof buf, "%s", name.c_str());
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, runtime().world_size() - 1, MPI_COMM_WORLD);
  return buf;
}

// The error a collective call throws on this rank (the same code everywhere; the message names the place).
template <typename Fn>
std::string error_text(Fn&& fn, ErrorCode want) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a strata::Error";
  return {};
}

// The key ranks reduce over orders places (unit, then slot, then element) and keeps the kind of value.
TEST(NonFiniteState, PlaceKeysOrderAndRoundTrip) {
  const NonFiniteAt a{0, 3, 1000, NAN}, b{1, 0, 0, INFINITY}, c{1, 0, 7, -INFINITY}, d{1, 2, 0, NAN};
  EXPECT_LT(a.key(), b.key());
  EXPECT_LT(b.key(), c.key());
  EXPECT_LT(c.key(), d.key());
  for (const NonFiniteAt& at : {a, b, c, d}) {
    const NonFiniteAt back = NonFiniteAt::from_key(at.key());
    EXPECT_EQ(back.unit, at.unit);
    EXPECT_EQ(back.slot, at.slot);
    EXPECT_EQ(back.element, at.element);
    EXPECT_EQ(std::isnan(back.value), std::isnan(at.value));
    if (!std::isnan(at.value)) {
      EXPECT_EQ(back.value, at.value);
    }
  }
}

TEST(NonFiniteState, SaveRefusesNonFiniteWeightsAndLeavesTheFile) {
  SharedDir dir;
  TrainConfig cfg = tiny_config();
  TokenFile data = tiny_data(cfg);
  GptTrainer t(runtime(), cfg, data);
  t.step(0);
  const std::string path = dir.file("weights.safetensors");
  t.save(path);
  const std::string before = file_bytes(path);
  ASSERT_FALSE(before.empty());
  const std::string name = poison_last_rank(t);
  const std::string what = error_text([&] { t.save(path); }, ErrorCode::kNonFinite);
  EXPECT_NE(what.find("not saving " + path), std::string::npos) << what;
  EXPECT_NE(what.find("'" + name + "'"), std::string::npos) << what;
  EXPECT_NE(what.find("is NaN"), std::string::npos) << what;
  EXPECT_EQ(file_bytes(path), before) << "the previous file changed";
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(NonFiniteState, CheckpointSaveRefusesNonFiniteWeights) {
  SharedDir dir;
  TrainConfig cfg = tiny_config();
  cfg.checkpoint.dir = dir.file("ckpt");
  TokenFile data = tiny_data(cfg);
  GptTrainer t(runtime(), cfg, data);
  t.step(0);
  t.checkpointer()->save(1, nlohmann::json{{"next_step", 1}});
  const std::string name = poison_last_rank(t);
  const std::string what =
      error_text([&] { t.checkpointer()->save(2, nlohmann::json{{"next_step", 2}}); }, ErrorCode::kNonFinite);
  EXPECT_NE(what.find("not saving checkpoint"), std::string::npos) << what;
  EXPECT_NE(what.find("'" + name + "'"), std::string::npos) << what;
  EXPECT_NE(what.find("step-00000001, is intact"), std::string::npos) << what;
  EXPECT_EQ(t.checkpointer()->latest_step(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir.file("ckpt/step-00000002.tmp")));
}

// A file of the tiny model's weights (its spec init), plus `extra` tensors; rank 0 writes, every rank returns after.
void write_weights(const std::string& path, const std::vector<std::pair<std::string, std::vector<float>>>& extra,
                   const std::vector<std::int64_t>& extra_shape) {
  if (runtime().rank() == 0) {
    TrainConfig cfg = tiny_config();
    std::vector<std::vector<float>> values;
    SafetensorsWriter w;
    for (const UnitSpec& u : gpt_units(cfg.model))
      for (const SlotSpec& s : u.slots) {
        values.emplace_back(shape_numel(s.shape));
        spec_init(cfg.model, ParamSlot{s.name, s.shape, shape_numel(s.shape), 0, s.weight_decay, s.trainable, s.tp},
                  0, values.back().size(), values.back().data(), cfg.seed);
        w.add_f32(s.name, DType::kF32, s.shape, values.back().data());
      }
    for (const auto& [name, v] : extra) w.add_f32(name, DType::kF32, extra_shape, v.data());
    w.write(path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Hugging Face GPT-2 files carry attention masks and may carry lm_head.weight tied to wte.weight: accepted. An
// lm_head.weight of other values, or a mask of a block the model does not have, is refused by name.
TEST(NonFiniteState, StrictInitSetsAsideOnlyHuggingFaceBuffers) {
  SharedDir dir;
  TrainConfig cfg = tiny_config();
  TokenFile data = tiny_data(cfg);
  std::vector<float> wte(static_cast<std::size_t>(cfg.model.vocab) * cfg.model.embd);
  spec_init(cfg.model, ParamSlot{"wte.weight", {cfg.model.vocab, cfg.model.embd}, wte.size(), 0, true, true, {}}, 0,
            wte.size(), wte.data(), cfg.seed);
  const std::vector<std::int64_t> wte_shape{cfg.model.vocab, cfg.model.embd};
  cfg.init = dir.file("hf.safetensors");
  write_weights(cfg.init, {{"h.0.attn.bias", wte}, {"h.0.attn.masked_bias", wte}, {"lm_head.weight", wte}}, wte_shape);
  { GptTrainer accepted(runtime(), cfg, data); }

  std::vector<float> other = wte;
  other[3] += 1.0f;
  cfg.init = dir.file("untied.safetensors");
  write_weights(cfg.init, {{"lm_head.weight", other}}, wte_shape);
  std::string what = error_text([&] { GptTrainer t(runtime(), cfg, data); }, ErrorCode::kIo);
  EXPECT_NE(what.find("1 tensor(s) that are not parameters of this model: 'lm_head.weight'"), std::string::npos)
      << what;

  const std::string beyond = fmt::format("h.{}.attn.bias", cfg.model.layers);
  cfg.init = dir.file("beyond.safetensors");
  write_weights(cfg.init, {{beyond, wte}}, wte_shape);
  what = error_text([&] { GptTrainer t(runtime(), cfg, data); }, ErrorCode::kIo);
  EXPECT_NE(what.find("'" + beyond + "'"), std::string::npos) << what;
}

}  // namespace
}  // namespace strata::gpt
