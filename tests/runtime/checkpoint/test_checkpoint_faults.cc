// Checkpointer failure tests (CPU backend, np 1-4): a full disk on one rank during a save fails the save on every
// rank and leaves the last committed checkpoint loadable; a corrupt, truncated or missing rank file, an index of
// another model or of a newer format fail the load on every rank, before any step, and leave the model usable.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>

#include "core/env.h"
#include "runtime/checkpoint/chunk_file.h"
#include "tests/runtime/checkpoint/checkpoint_test_runs.h"
#include "tests/support/mlp_training.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::barrier;
using test::checkpoint_options;
using test::CheckpointRoot;
using test::kSeed;
using test::Layout;
using test::MlpRun;
using test::runtime;
using test::small_config;
using test::snapshot;
using test::Snapshot;
using test::Thrown;
using test::thrown_by;
using test::train;

// STRATA_FAULT's K counts the data files (".bin") a process has created over its whole life, not per checkpointer
// or per save, so an in-process test cannot know K up front. This finds it: a probe file takes the next number, and
// its number is the K at which an injected ENOSPC strikes it. Returns the number the next data file will take.
int next_data_file_number(const std::string& dir) {
  const Env saved = env();
  ChunkWriter probe(fmt::format("{}/probe-{}.bin", dir, runtime().rank()), 4096);
  int number = -1;
  for (int k = 1; k <= 1000000 && number < 0; ++k) {
    Env e = saved;
    e.fault = fmt::format("checkpoint-enospc:{}:{}", runtime().rank(), k);
    set_env(e);
    std::vector<std::uint32_t> crc;
    try {
      probe.append("x", 1, crc);
    } catch (const Error&) {
      number = k;
    }
  }
  set_env(saved);
  EXPECT_GT(number, 0) << "the probe file was never struck";
  return number + 1;
}

// Sets STRATA_FAULT for the life of the object.
class FaultScope {
 public:
  explicit FaultScope(const std::string& fault) : saved_(env()) {
    Env e = saved_;
    e.fault = fault;
    set_env(e);
  }
  ~FaultScope() { set_env(saved_); }

 private:
  Env saved_;
};

// (d) ENOSPC on the last rank while it writes its file of the second save (synchronous, or asynchronous and reported
// at the commit): every rank throws, the failing one kIo
// naming its file, the others kRemote naming it and saying the last committed checkpoint is intact; that checkpoint
// still loads bitwise, and the next save works (and prunes the failed one's directory).
TEST(CheckpointFaults, FullDiskOnOneRankFailsTheSaveEverywhereAndKeepsTheLastCheckpoint) {
  CheckpointRoot root;
  const int world = runtime().world_size(), victim = world - 1;
  const std::string dir = root.dir("enospc");
  const CheckpointDir cdir(dir);
  struct Case {
    Layout layout;
    bool async;
  };
  for (const Case& c : {Case{Layout{3}, false}, Case{Layout{0}, false}, Case{Layout{3}, true}}) {
    const Layout& layout = c.layout;
    SCOPED_TRACE(layout.describe() + (c.async ? ", asynchronous" : ""));
    MlpRun a(small_config(), layout, kSeed);
    Checkpointer ck(*a.model, *a.optimizer, runtime().world(), checkpoint_options(dir, 2, c.async));
    for (int s = 0; s < 2; ++s) train(a, s);
    ck.save(2, {{"next_step", 2}});
    ck.wait();  // commits an asynchronous save; nothing for a synchronous one
    const Snapshot at2 = snapshot(a);
    train(a, 2);
    barrier();
    const int k = next_data_file_number(dir);
    Thrown t;
    {
      // Every rank gets the same fault string; only the victim's K-th data file matches it.
      int victim_k = runtime().rank() == victim ? k : 0;
      MPI_Bcast(&victim_k, 1, MPI_INT, victim, MPI_COMM_WORLD);
      FaultScope fault(fmt::format("checkpoint-enospc:{}:{}", victim, victim_k));
      // Asynchronous: the background write fails, and the commit (here wait(); in training a poll()) reports it.
      t = thrown_by([&] {
        ck.save(3, {{"next_step", 3}});
        ck.wait();
      });
    }
    const std::string file = cdir.tmp_path(3) + "/" + CheckpointDir::rank_file(victim);
    if (runtime().rank() == victim) {
      EXPECT_EQ(t.code, ErrorCode::kIo) << t.message;
      EXPECT_NE(t.message.find("cannot write " + file + ": No space left on device"), std::string::npos) << t.message;
    } else {
      EXPECT_EQ(t.code, ErrorCode::kRemote) << t.message;
      EXPECT_NE(t.message.find(fmt::format("rank(s) {} of", victim)), std::string::npos) << t.message;
      EXPECT_NE(t.message.find("the last committed checkpoint, " + cdir.step_path(2) + ", is intact"),
                std::string::npos)
          << t.message;
    }
    EXPECT_FALSE(ck.last_save().committed);
    EXPECT_EQ(cdir.latest_step(), 2);
    EXPECT_EQ(cdir.committed_steps(), std::vector<std::int64_t>{2});
    EXPECT_EQ(read_text_file(dir + "/latest"), "step-00000002\n");
    {
      MlpRun b(small_config(), layout, kSeed + 1);
      Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(dir));
      EXPECT_EQ(loader.load().value("next_step", -1), 2);
      test::expect_same_state(snapshot(b), at2, "the checkpoint before the failed save");
    }
    // The job could go on: the next save commits, and the failed save's directory goes.
    train(a, 3);
    ck.save(4, {{"next_step", 4}});
    ck.wait();
    EXPECT_TRUE(ck.last_save().committed);
    EXPECT_EQ(cdir.committed_steps(), (std::vector<std::int64_t>{2, 4}));
    EXPECT_FALSE(fs::exists(cdir.tmp_path(3)));
    barrier();
    if (runtime().rank() == 0) fs::remove_all(dir);
    barrier();
  }
}

// How a checkpoint is damaged before the load.
enum class Damage { kCorrupt, kTruncated, kMissingFile, kOtherModel, kNewerVersion };

const char* damage_name(Damage d) {
  switch (d) {
    case Damage::kCorrupt: return "a flipped byte in the middle of the last rank's file";
    case Damage::kTruncated: return "the last rank's file cut in half";
    case Damage::kMissingFile: return "the last rank's file missing";
    case Damage::kOtherModel: return "loaded into an MLP of another hidden size";
    case Damage::kNewerVersion: return "an index of version 99";
  }
  return "?";
}

// (e) Each damage is an error on every rank: the rank reading the bad bytes throws kIo naming its file, the others
// kRemote naming that rank; a foreign model is kMismatch and a newer version kIo on every rank (every rank reads the
// index). Nothing is loaded (the optimizer is still at step 0), no rank hangs, and the model then loads a good
// checkpoint bitwise and trains.
TEST(CheckpointFaults, DamagedCheckpointFailsTheLoadOnEveryRank) {
  CheckpointRoot root;
  const int world = runtime().world_size(), victim = world - 1;
  const Layout layout{3};
  MlpRun a(small_config(), layout, kSeed);
  for (int s = 0; s < 2; ++s) train(a, s);
  const std::string good = root.dir("good");
  {
    Checkpointer saver(*a.model, *a.optimizer, runtime().world(), checkpoint_options(good));
    saver.save(2, {{"next_step", 2}});
  }
  const Snapshot at2 = snapshot(a);
  int n = 0;
  for (Damage damage :
       {Damage::kCorrupt, Damage::kTruncated, Damage::kMissingFile, Damage::kOtherModel, Damage::kNewerVersion}) {
    SCOPED_TRACE(damage_name(damage));
    const std::string dir = root.dir(fmt::format("damaged_{}", n++));
    const CheckpointDir cdir(dir);
    const std::string file = cdir.step_path(2) + "/" + CheckpointDir::rank_file(victim);
    const std::string index = cdir.step_path(2) + "/index.json";
    if (runtime().rank() == 0) {
      fs::copy(good, dir, fs::copy_options::recursive);
      const std::uintmax_t bytes = fs::file_size(file);
      if (damage == Damage::kCorrupt) {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(static_cast<std::streamoff>(bytes / 2));
        char c = 0;
        f.read(&c, 1);
        c = static_cast<char>(c ^ 0x01);  // the lowest bit of one byte
        f.seekp(static_cast<std::streamoff>(bytes / 2));
        f.write(&c, 1);
      } else if (damage == Damage::kTruncated) {
        fs::resize_file(file, bytes / 2);
      } else if (damage == Damage::kMissingFile) {
        fs::remove(file);
      } else if (damage == Damage::kNewerVersion) {
        nlohmann::json j = nlohmann::json::parse(read_text_file(index));
        j["version"] = 99;
        std::ofstream(index) << j.dump(1);
      }
    }
    barrier();
    mlp::MlpConfig cfg = small_config();
    if (damage == Damage::kOtherModel) cfg.hidden = 14;
    MlpRun b(cfg, layout, kSeed + 1);
    Thrown t;
    {
      Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(dir));
      t = thrown_by([&] { loader.load(); });
    }
    EXPECT_EQ(b.optimizer->steps_taken(), 0) << "nothing of the optimizer was restored";
    switch (damage) {
      case Damage::kCorrupt:
      case Damage::kTruncated:
      case Damage::kMissingFile: {
        const char* why = damage == Damage::kCorrupt     ? "is corrupt: tensor '"
                          : damage == Damage::kTruncated ? "it is truncated"
                                                         : "cannot open checkpoint file";
        if (runtime().rank() == victim) {
          EXPECT_EQ(t.code, ErrorCode::kIo) << t.message;
          EXPECT_NE(t.message.find(file), std::string::npos) << "names the file: " << t.message;
          EXPECT_NE(t.message.find(why), std::string::npos) << t.message;
        } else {
          EXPECT_EQ(t.code, ErrorCode::kRemote) << t.message;
          EXPECT_NE(t.message.find(fmt::format("loading {}: rank(s) {} of", cdir.step_path(2), victim)),
                    std::string::npos)
              << t.message;
        }
        break;
      }
      case Damage::kOtherModel:
        EXPECT_EQ(t.code, ErrorCode::kMismatch) << t.message;
        EXPECT_NE(t.message.find("holds another model: unit 'layer0' slot 0 is 'layer0.weight' [7, 13]"),
                  std::string::npos)
            << t.message;
        EXPECT_NE(t.message.find("'layer0.weight' [7, 14] weight_decay true trainable true here"), std::string::npos)
            << t.message;
        break;
      case Damage::kNewerVersion:
        EXPECT_EQ(t.code, ErrorCode::kIo) << t.message;
        EXPECT_NE(t.message.find(index), std::string::npos) << t.message;
        EXPECT_NE(t.message.find("format version 99 was written by a newer Strata"), std::string::npos) << t.message;
        break;
    }
    // Usable: a good checkpoint of the same model loads into it bitwise and it trains.
    if (damage != Damage::kOtherModel) {
      Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(good));
      EXPECT_EQ(loader.load().value("next_step", -1), 2);
      test::expect_same_state(snapshot(b), at2, "a good checkpoint after the failed load");
    }
    EXPECT_NO_THROW(train(b, 2));
    barrier();
  }
}

// When a load fails because one rank found the checkpoint damaged, the other ranks' kRemote names the failing ranks
// and does not call that checkpoint intact (a save's failure does say which checkpoint is still intact).
TEST(CheckpointFaults, FailedLoadDoesNotCallTheDamagedCheckpointIntact) {
  CheckpointRoot root;
  const int victim = runtime().world_size() - 1;
  const std::string dir = root.dir("intact");
  MlpRun a(small_config(), Layout{3}, kSeed);
  train(a, 0);
  {
    Checkpointer saver(*a.model, *a.optimizer, runtime().world(), checkpoint_options(dir));
    saver.save(1, {{"next_step", 1}});
  }
  if (runtime().rank() == 0)
    fs::resize_file(CheckpointDir(dir).step_path(1) + "/" + CheckpointDir::rank_file(victim), 8);
  barrier();
  MlpRun b(small_config(), Layout{3}, kSeed + 1);
  Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(dir));
  const Thrown t = thrown_by([&] { loader.load(); });
  EXPECT_EQ(t.code, runtime().rank() == victim ? ErrorCode::kIo : ErrorCode::kRemote) << t.message;
  EXPECT_EQ(t.message.find(CheckpointDir(dir).step_path(1) + ", is intact"), std::string::npos) << t.message;
}

// A Checkpointer destroyed with an asynchronous save in flight joins its writer but does not commit (a commit is
// collective, and a destructor may run while an error unwinds): the save stays a step-N.tmp directory that no load
// sees. A trainer commits with wait() (GptTrainer::finish).
TEST(CheckpointFaults, DestructorLeavesAnUncommittedAsynchronousSaveUnloadable) {
  CheckpointRoot root;
  const std::string dir = root.dir("destructor");
  MlpRun a(small_config(), Layout{3}, kSeed);
  train(a, 0);
  {
    Checkpointer ck(*a.model, *a.optimizer, runtime().world(), checkpoint_options(dir, 2, true));
    ck.save(1, {{"next_step", 1}});
  }
  barrier();
  EXPECT_EQ(CheckpointDir(dir).latest_step(), -1);
  EXPECT_EQ(CheckpointDir(dir).incomplete_steps(), std::vector<std::int64_t>{1});
}

}  // namespace
}  // namespace strata
