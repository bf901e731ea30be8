// A sharded model through SafetensorsReader: a Hugging Face model.safetensors.index.json and a model directory read
// as one set of tensors, each read from its own shard; every inconsistency between the index and its shards refused
// naming the index, the shard and the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class ShardDir {
 public:
  ShardDir() {
    dir_ = fs::temp_directory_path() / ("strata_shards_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~ShardDir() { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string dir() const { return dir_.string(); }
  void write_index(const nlohmann::json& weight_map, const std::string& name = "model.safetensors.index.json") const {
    std::ofstream(path(name)) << nlohmann::json{{"metadata", {{"total_size", 96}}}, {"weight_map", weight_map}}.dump();
  }

 private:
  fs::path dir_;
};

// What a Hugging Face save_pretrained with a small max_shard_size writes: two shards and their index.
const std::vector<float> kA = {1, 2, 3, 4, 5, 6}, kB = {0.5f, -1, 2, 1024}, kC = {1, 2, 3, 4, 5};

void write_two_shards(const ShardDir& d) {
  SafetensorsWriter first, second;
  first.add_f32("model.embed_tokens.weight", DType::kF32, {2, 3}, kA.data());
  first.add_f32("model.norm.weight", DType::kBF16, {4}, kB.data());
  second.add_f32("lm_head.weight", DType::kF16, {5}, kC.data());
  first.write(d.path("model-00001-of-00002.safetensors"));
  second.write(d.path("model-00002-of-00002.safetensors"));
}

const nlohmann::json kMap = {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                             {"model.norm.weight", "model-00001-of-00002.safetensors"},
                             {"lm_head.weight", "model-00002-of-00002.safetensors"}};

// f() throws strata::Error with `code` whose message holds every part.
void expect_error(const std::function<void()>& f, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying " << parts.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(SafetensorsShards, IndexAndDirectoryReadAsOneFile) {
  ShardDir d;
  write_two_shards(d);
  d.write_index(kMap);
  for (const std::string& at : {d.path("model.safetensors.index.json"), d.dir()}) {
    SafetensorsReader r(at);
    EXPECT_EQ(r.path(), at);
    EXPECT_EQ(r.file_count(), 2u);
    EXPECT_EQ(r.names(),
              (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}));
    EXPECT_EQ(r.read_f32("model.embed_tokens.weight"), kA);
    EXPECT_EQ(r.read_f32("model.norm.weight"), kB);  // bf16 holds these exactly
    EXPECT_EQ(r.read_f32("lm_head.weight"), kC);
    std::vector<float> part(2);
    r.read_f32("model.embed_tokens.weight", 3, 2, part.data());
    EXPECT_EQ(part, (std::vector<float>{4, 5}));
    EXPECT_EQ(r.info("lm_head.weight").file, d.path("model-00002-of-00002.safetensors"));
    EXPECT_EQ(r.metadata().at("total_size"), 96);
    expect_error([&] { r.check_shape("lm_head.weight", {4}); }, ErrorCode::kIo,
                 {"model-00002-of-00002.safetensors", "has shape [5], expected [4]"});
  }
  // Without an index, a directory is its model.safetensors.
  ShardDir one;
  SafetensorsWriter w;
  w.add_f32("wte.weight", DType::kF32, {2, 3}, kA.data());
  w.write(one.path("model.safetensors"));
  SafetensorsReader r(one.dir());
  EXPECT_EQ(r.file_count(), 1u);
  EXPECT_EQ(r.read_f32("wte.weight"), kA);
}

TEST(SafetensorsShards, InconsistentIndexesAreRefused) {
  const std::string one = "model-00001-of-00002.safetensors", two = "model-00002-of-00002.safetensors";
  struct Case {
    std::string what;
    std::function<void(ShardDir&)> make;  // after write_two_shards
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"a shard is missing",
       [&](ShardDir& d) {
         fs::remove(d.path(two));
         d.write_index(kMap);
       },
       {"maps tensor 'lm_head.weight' to shard", two, "which does not exist"}},
      {"the index maps a tensor to a shard that lacks it",
       [&](ShardDir& d) {
         nlohmann::json m = kMap;
         m["model.layers.0.mlp.up_proj.weight"] = one;
         d.write_index(m);
       },
       {"maps tensor 'model.layers.0.mlp.up_proj.weight' to shard", one, "which lacks it"}},
      {"a tensor in two shards",
       [&](ShardDir& d) {
         SafetensorsWriter w;
         w.add_f32("model.norm.weight", DType::kF32, {4}, kB.data());
         w.add_f32("lm_head.weight", DType::kF16, {5}, kC.data());
         w.write(d.path(two));
         d.write_index(kMap);
       },
       {"tensor 'model.norm.weight' is in two shards", one, two}},
      {"a shard holds a tensor the index does not list",
       [&](ShardDir& d) {
         nlohmann::json m = kMap;
         m.erase("model.norm.weight");
         d.write_index(m);
       },
       {"holds tensor 'model.norm.weight', which the index does not list"}},
      {"the index names the other shard",
       [&](ShardDir& d) {
         nlohmann::json m = kMap;
         m["model.norm.weight"] = two;
         d.write_index(m);
       },
       {"maps tensor 'model.norm.weight' to shard 'model-00002-of-00002.safetensors', but it is in", one}},
      {"a shard name that leaves the directory",
       [&](ShardDir& d) {
         nlohmann::json m = kMap;
         m["lm_head.weight"] = "../" + two;
         d.write_index(m);
       },
       {"weight_map[\"lm_head.weight\"] is '../", "not the name of a file beside the index"}},
      {"no weight_map",
       [&](ShardDir& d) { std::ofstream(d.path("model.safetensors.index.json")) << "{\"a\": 1}"; },
       {"expected an object with a \"weight_map\" object"}},
      {"a truncated shard",
       [&](ShardDir& d) {
         fs::resize_file(d.path(two), fs::file_size(d.path(two)) - 4);
         d.write_index(kMap);
       },
       {two, "run past the data section", "truncated file?"}},
      {"a directory with neither",
       [&](ShardDir& d) {
         fs::remove(d.path(one));
         fs::remove(d.path(two));
       },
       {"holds neither model.safetensors nor model.safetensors.index.json"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ShardDir d;
    write_two_shards(d);
    c.make(d);
    SafetensorsReader r;
    expect_error([&] { r.open(d.dir()); }, ErrorCode::kIo, c.says);
    EXPECT_TRUE(r.names().empty());
    EXPECT_EQ(r.file_count(), 0u);
  }
}

TEST(SafetensorsShards, IntegerTensorIsRefusedNamingItsShard) {
  ShardDir d;
  write_two_shards(d);
  SafetensorsWriter w;
  const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5};
  w.add_bytes("lm_head.weight", DType::kI32, {5}, ids.data(), ids.size() * 4);
  w.write(d.path("model-00002-of-00002.safetensors"));
  d.write_index(kMap);
  SafetensorsReader r(d.dir());
  expect_error([&] { r.read_f32("lm_head.weight"); }, ErrorCode::kInvalidArgument,
               {"tensor 'lm_head.weight' in", "model-00002-of-00002.safetensors is I32"});
}

}  // namespace
}  // namespace strata
