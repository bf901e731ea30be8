// CheckpointIndex tests (in memory, on every rank): the JSON round trip, every refusal of parse() (each a kIo naming
// the index), coverage_problem() and check_model(), with whole-tensor chunks and with the boxes of tp slices.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_index.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using nlohmann::json;

const std::string kWhere = "/ckpt/step-00000010/index.json";

// A model of two units: "embed" (w [3, 5] decayed, frozen scale [5], empty [0]) and "head" (scalar b).
std::vector<UnitSpec> test_units() {
  return {UnitSpec{"embed",
                   {SlotSpec{"w", {3, 5}, true, true}, SlotSpec{"scale", {5}, false, false},
                    SlotSpec{"empty", {0}, true, true}}},
          UnitSpec{"head", {SlotSpec{"b", {}, false, true}}}};
}

// A chunk of `count` f32 elements from `begin` at `offset` of `file`, with the checksum count block_bytes 64 needs.
ChunkRecord chunk(int file, std::uint64_t offset, const std::vector<std::int64_t>& shape, std::uint64_t begin,
                  std::uint64_t count) {
  ChunkRecord c;
  c.file = file;
  c.offset = offset;
  c.box_offset.assign(shape.size(), 0);
  c.box_shape = shape;
  c.begin = begin;
  c.count = count;
  c.crc32.assign((count * 4 + 63) / 64, 0x12345678u);
  return c;
}

// A valid index of test_units() saved by two ranks: w's 15 elements split 9 + 6 over the two files (36 and 24 bytes:
// one 64-byte block each), its moments likewise, the frozen scale (no moments) whole in file 0, the scalar b in file 1.
CheckpointIndex valid_index() {
  CheckpointIndex x;
  x.step = 10;
  x.world_size = 2;
  x.layout = {{"zero_stage", 3}, {"mesh", {{"dp_shard", 2}, {"dp_replicate", 1}}}};
  x.units = test_units();
  x.block_bytes = 64;
  x.files = {FileRecord{"rank-00000.bin", 4096}, FileRecord{"rank-00001.bin", 4096}};
  std::uint64_t at[2] = {0, 0};
  auto add = [&](const std::string& name, const std::vector<std::int64_t>& shape,
                 std::vector<std::pair<int, std::uint64_t>> parts) {
    TensorRecord t{name, shape, DType::kF32, {}};
    std::uint64_t begin = 0;
    for (auto [file, count] : parts) {
      t.chunks.push_back(chunk(file, at[file], shape, begin, count));
      at[file] += count * 4;
      begin += count;
    }
    x.tensors[name] = t;
  };
  for (const char* k : {"params/", "exp_avg/", "exp_avg_sq/"}) add(std::string(k) + "w", {3, 5}, {{0, 9}, {1, 6}});
  add("params/scale", {5}, {{0, 5}});
  add("params/empty", {0}, {});
  for (const char* k : {"exp_avg/", "exp_avg_sq/"}) add(std::string(k) + "empty", {0}, {});
  for (const char* k : {"params/", "exp_avg/", "exp_avg_sq/"}) add(std::string(k) + "b", {}, {{1, 1}});
  x.state = {{"optimizer", {{"name", "adamw"}, {"step", 10}, {"loss_scale", 1.0}, {"good_steps", 0}}},
             {"trainer", {{"next_step", 10}}}};
  return x;
}

// parse() of `j` throws kIo whose message names the index and contains `fragment`.
void expect_refused(const json& j, const std::string& fragment, const std::string& why) {
  SCOPED_TRACE(why);
  std::string message;
  auto code = test::error_code_of([&] {
    try {
      CheckpointIndex::parse(j.dump(), kWhere);
    } catch (const Error& e) {
      message = e.what();
      throw;
    }
  });
  EXPECT_EQ(code, ErrorCode::kIo) << message;
  EXPECT_NE(message.find(kWhere), std::string::npos) << "the message names the index: " << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << message;
}

void expect_refused_text(const std::string& text, const std::string& fragment) {
  std::string message;
  auto code = test::error_code_of([&] {
    try {
      CheckpointIndex::parse(text, kWhere);
    } catch (const Error& e) {
      message = e.what();
      throw;
    }
  });
  EXPECT_EQ(code, ErrorCode::kIo) << message;
  EXPECT_NE(message.find(kWhere), std::string::npos) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << message;
}

TEST(CheckpointIndex, RoundTripsThroughJson) {
  const CheckpointIndex x = valid_index();
  const CheckpointIndex y = CheckpointIndex::parse(x.serialize(), kWhere);
  EXPECT_EQ(y.to_json(), x.to_json());
  EXPECT_EQ(y.version, kCheckpointFormatVersion);
  EXPECT_EQ(y.step, 10);
  EXPECT_EQ(y.world_size, 2);
  EXPECT_EQ(y.block_bytes, 64u);
  ASSERT_EQ(y.units.size(), 2u);
  EXPECT_EQ(y.units[0].slots[1].name, "scale");
  EXPECT_FALSE(y.units[0].slots[1].trainable);
  EXPECT_FALSE(y.units[0].slots[1].weight_decay);
  EXPECT_TRUE(y.units[1].slots[0].shape.empty()) << "a scalar stays a scalar";
  EXPECT_EQ(y.files[1].name, "rank-00001.bin");
  const TensorRecord& w = y.tensor("exp_avg_sq/w");
  EXPECT_EQ(w.numel(), 15u);
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[1].file, 1);
  EXPECT_EQ(w.chunks[1].begin, 9u);
  EXPECT_EQ(w.chunks[1].crc32.size(), 1u);  // 24 bytes: one block of 64
  EXPECT_EQ(y.tensor("params/empty").numel(), 0u);
  EXPECT_EQ(y.state["trainer"]["next_step"], 10);
  EXPECT_EQ(y.coverage_problem(), "");
  EXPECT_EQ(test::error_code_of([&] { y.tensor("params/nothing"); }), ErrorCode::kIo);
}

TEST(CheckpointIndex, ParseSortsChunks) {
  json j = valid_index().to_json();
  auto& chunks = j["tensors"]["params/w"]["chunks"];
  std::swap(chunks[0], chunks[1]);
  const CheckpointIndex y = CheckpointIndex::parse(j.dump(), kWhere);
  EXPECT_EQ(y.tensor("params/w").chunks[0].begin, 0u);
  EXPECT_EQ(y.tensor("params/w").chunks[1].begin, 9u);
}

TEST(CheckpointIndex, RefusesWhatIsNotAnIndex) {
  expect_refused_text("{\"format\": \"strata-checkpoint\", ", "not valid JSON");
  expect_refused_text("", "not valid JSON");
  expect_refused_text("[1, 2]", "not a JSON object");
  json j = valid_index().to_json();
  j["format"] = "safetensors";
  expect_refused(j, "not a strata-checkpoint index", "another format");
  j.erase("format");
  expect_refused(j, "not a strata-checkpoint index", "no format");
}

// Nesting thousands deep (the fuzzer's finding: copying or printing such a value overflowed the stack) is refused while
// parsing, wherever it is.
TEST(CheckpointIndex, RefusesDeepNesting) {
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  std::string text = valid_index().serialize();
  text.insert(text.rfind('}'), ", \"deep\": " + deep);
  expect_refused_text(text, "nested deeper than 64 levels");
  expect_refused_text(deep, "nested deeper than 64 levels");
}

TEST(CheckpointIndex, RefusesANewerOrImpossibleVersion) {
  json j = valid_index().to_json();
  j["version"] = 99;
  expect_refused(j, "written by a newer Strata", "version 99");
  j["version"] = 0;
  expect_refused(j, "version 0 does not exist", "version 0");
  j["version"] = "1";
  expect_refused(j, ".version: expected an integer, got a string \"1\"", "a string version");
}

TEST(CheckpointIndex, RefusesMissingFields) {
  const json good = valid_index().to_json();
  for (const char* key :
       {"version", "step", "world_size", "layout", "model", "block_bytes", "files", "tensors", "state"}) {
    json j = good;
    j.erase(key);
    expect_refused(j, fmt::format(".{}: missing", key), key);
  }
  json j = good;
  j["model"]["units"][0]["slots"][1].erase("trainable");
  expect_refused(j, ".model.units[0].slots[1].trainable: missing", "a slot's flag");
  j = good;
  j["tensors"]["params/w"]["chunks"][1].erase("crc32");
  expect_refused(j, ".tensors[\"params/w\"].chunks[1].crc32: missing", "a chunk's checksums");
  j = good;
  j["files"][0].erase("bytes");
  expect_refused(j, ".files[0].bytes: missing", "a file's size");
}

TEST(CheckpointIndex, RefusesWrongTypes) {
  const json good = valid_index().to_json();
  json j = good;
  j["step"] = 1.5;
  expect_refused(j, ".step: expected an integer in [0, 2^62], got 1.5", "a fractional step");
  j = good;
  j["world_size"] = -2;
  expect_refused(j, ".world_size: expected an integer in [1, 2^24], got -2", "a negative world");
  j = good;
  j["layout"] = "zero3";
  expect_refused(j, ".layout: expected an object, got a string", "a string layout");
  j = good;
  j["model"]["units"] = json::object();
  expect_refused(j, ".model.units: expected an array, got an object", "units not a list");
  j = good;
  j["model"]["units"][1]["slots"][0]["weight_decay"] = 1;
  expect_refused(j, ".weight_decay: expected true or false, got an integer 1", "a number for a flag");
  j = good;
  j["tensors"]["params/w"]["chunks"][0]["offset"] = "0";
  expect_refused(j, "chunks[0].offset: expected an integer, got a string", "a string offset");
  j = good;
  j["tensors"]["params/w"]["chunks"][0]["crc32"][0] = std::uint64_t{1} << 33;
  expect_refused(j, ".crc32[0]: expected an integer in [0, 2^32 - 1], got 8589934592", "a checksum over 32 bits");
  j = good;
  j["tensors"]["params/w"]["chunks"][0]["crc32"][0] = -1;
  expect_refused(j, ".crc32[0]: expected an integer in [0, 2^32 - 1], got -1", "a negative checksum");
  j = good;
  j["step"] = -3;
  expect_refused(j, ".step: expected an integer in [0, 2^62], got -3", "a negative step");
  j = good;
  j["block_bytes"] = 8;
  expect_refused(j, ".block_bytes: expected an integer in [64, 2^30], got 8", "a tiny block");
}

// Hardening 2: the index carries its own checksum (its last field); a digit changed anywhere before it is refused, an
// index rewritten by another program (the field elsewhere) is refused, and one without the field (written before)
// loads, marked unchecked.
TEST(CheckpointIndex, CarriesAndChecksItsOwnChecksum) {
  const std::string text = valid_index().serialize();
  ASSERT_NE(text.find("\"index_crc32\": "), std::string::npos) << text;
  EXPECT_TRUE(CheckpointIndex::parse(text, kWhere).checksummed);
  EXPECT_EQ(CheckpointIndex::parse(text, kWhere).serialize(), text);
  // One digit of the step (10 -> 19): valid JSON, in range, caught only by the checksum.
  std::string flipped = text;
  const std::size_t at = flipped.find("\"step\": 10");
  ASSERT_NE(at, std::string::npos);
  flipped[at + 9] = '9';
  expect_refused_text(flipped, "its contents do not match its checksum");
  // The checksum's own digits.
  std::string wrong = text;
  wrong[wrong.rfind('}') - 2] = wrong[wrong.rfind('}') - 2] == '1' ? '2' : '1';
  expect_refused_text(wrong, "its contents do not match its checksum");
  // Rewritten (keys sorted by a JSON tool): the checksum is no longer where Strata writes it.
  expect_refused_text(json::parse(text).dump(1), "is not its last field, where Strata writes it");
  // Written before index checksums: loads, unchecked.
  EXPECT_FALSE(CheckpointIndex::parse(valid_index().to_json().dump(1), kWhere).checksummed);
}

// Fields this version does not know are named (for the loader's warning), not refused; state the runtime reads is
// checked for type and range, naming the index and the field.
TEST(CheckpointIndex, NamesUnknownFieldsAndChecksTheOptimizerState) {
  json j = valid_index().to_json();
  j["future_field"] = 1;
  j["model"]["units"][0]["extra"] = true;
  const CheckpointIndex y = CheckpointIndex::parse(j.dump(), kWhere);
  EXPECT_EQ(y.unknown_fields, (std::vector<std::string>{".model.units[0].extra", ".future_field"}));
  j = valid_index().to_json();
  j["state"]["optimizer"]["step"] = "10";
  expect_refused(j, ".state.optimizer.step: expected an integer, got a string \"10\"", "a string optimizer step");
  j = valid_index().to_json();
  j["state"]["optimizer"]["step"] = -1;
  expect_refused(j, ".state.optimizer.step: expected an integer in [0, 2^62], got -1", "a negative optimizer step");
  j = valid_index().to_json();
  j["state"]["optimizer"]["loss_scale"] = 0;
  j["state"]["optimizer"]["good_steps"] = 0;
  expect_refused(j, ".state.optimizer.loss_scale: expected a number in (0, ", "a zero loss scale");
}

TEST(CheckpointIndex, RefusesBadDtypesAndShapes) {
  const json good = valid_index().to_json();
  json j = good;
  j["tensors"]["params/w"]["dtype"] = "i32";
  expect_refused(j, "has dtype 'i32'", "an integer tensor");
  j["tensors"]["params/w"]["dtype"] = "float128";
  expect_refused(j, "has dtype 'float128'", "not a dtype");
  j = good;
  j["tensors"]["params/w"]["shape"] = {3, -5};
  expect_refused(j, ".shape[1]: expected an integer in [0, 2^40], got -5", "a negative dimension");
  j = good;
  j["model"]["units"][0]["slots"][0]["shape"] = {-1};
  expect_refused(j, ".shape[0]: expected an integer in [0, 2^40], got -1", "a negative slot dimension");
  j = good;
  j["tensors"]["params/w"]["shape"] = {3, "5"};
  expect_refused(j, ".shape[1]: expected an integer, got a string", "a string dimension");
  j = good;
  j["tensors"]["params/w"]["shape"] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  expect_refused(j, ".shape: 9 items, more than 8", "too many dimensions");
  j = good;
  j["tensors"]["params/w"]["shape"] = {1 << 30, 1 << 30, 1 << 30};
  expect_refused(j, "more than 2^50 elements", "an absurd size");
}

TEST(CheckpointIndex, RefusesChunksOutsideTheirFileBoxOrTensor) {
  const json good = valid_index().to_json();
  json j = good;
  j["tensors"]["params/w"]["chunks"][1]["offset"] = 4090;  // 24 bytes from 4090 pass the file's 4096
  expect_refused(j, "lies outside rank-00001.bin (4096 bytes)", "past the file's end");
  j = good;
  j["tensors"]["params/w"]["chunks"][1]["file"] = 2;
  expect_refused(j, "names file 2 of 2", "a file that is not listed");
  j = good;
  j["tensors"]["params/w"]["chunks"][1]["begin"] = 10;  // [10, 16) of a box of 15
  expect_refused(j, "holds elements [10, 16) of a box of 15", "past the box");
  j = good;
  j["tensors"]["params/w"]["chunks"][0]["count"] = 0;
  expect_refused(j, "holds elements [0, 0)", "an empty chunk");
  j = good;
  j["tensors"]["params/w"]["chunks"][0]["box_offset"] = {1, 0};  // rows [1, 4) of 3
  expect_refused(j, "box leaves the tensor in dimension 0", "a box outside the tensor");
  j = good;
  j["tensors"]["params/w"]["chunks"][0]["box_shape"] = {15};
  expect_refused(j, "box has 2 / 1 dimensions, the tensor 2", "a box of another rank");
}

TEST(CheckpointIndex, RefusesWrongChecksumCountsAndOverlaps) {
  const json good = valid_index().to_json();
  json j = good;
  j["tensors"]["exp_avg/w"]["chunks"][0]["crc32"].push_back(7);  // 36 bytes: one block
  expect_refused(j, "has 2 checksums for its 1 blocks", "one checksum too many");
  j = good;
  j["tensors"]["exp_avg/w"]["chunks"][0]["crc32"] = json::array();
  expect_refused(j, "has 0 checksums for its 1 blocks", "none");
  j = good;
  j["tensors"]["params/w"]["chunks"][1]["begin"] = 8;  // [0, 9) and [8, 14)
  expect_refused(j, "overlapping chunks at elements 0 and 8", "an overlap");
  j = good;
  j["tensors"]["params/w"]["chunks"][1]["begin"] = 0;
  j["tensors"]["params/w"]["chunks"][1]["count"] = 9;
  expect_refused(j, "overlapping chunks", "the same range twice");
}

TEST(CheckpointIndex, RefusesFileNamesOutsideTheDirectory) {
  for (const char* name : {"../rank-00000.bin", "sub/rank-00000.bin", "/etc/passwd", "..", ".", ""}) {
    json j = valid_index().to_json();
    j["files"][0]["name"] = name;
    expect_refused(j, "not a file of the checkpoint's directory", name);
  }
}

TEST(CheckpointIndex, CoverageFindsAGapAndADoubleCover) {
  CheckpointIndex x = valid_index();
  EXPECT_EQ(x.coverage_problem(), "");
  x.tensors["params/w"].chunks[1].begin = 10;  // [0, 9) and [10, 15)
  x.tensors["params/w"].chunks[1].count = 5;
  EXPECT_NE(x.coverage_problem().find("tensor 'params/w' has no chunk for elements [9, 10)"), std::string::npos)
      << x.coverage_problem();
  x = valid_index();
  x.tensors["params/w"].chunks.pop_back();  // the tail [9, 15) missing
  EXPECT_NE(x.coverage_problem().find("tensor 'params/w' has no chunk for elements [9, 15)"), std::string::npos)
      << x.coverage_problem();
  x = valid_index();
  x.tensors["exp_avg/w"].chunks[1].begin = 7;  // [0, 9) and [7, 13): 7 and 8 twice
  EXPECT_NE(x.coverage_problem().find("tensor 'exp_avg/w' has elements from 7 in two chunks"), std::string::npos)
      << x.coverage_problem();
  x = valid_index();
  x.tensors["params/b"].chunks.clear();
  EXPECT_NE(x.coverage_problem().find("tensor 'params/b' has no chunk for elements [0, 1)"), std::string::npos)
      << "a scalar has one element: " << x.coverage_problem();
}

// valid_index() with params/w [3, 5] saved as tp 2 slices of columns: box A, columns [0, 3) ([3, 3]), in two chunks
// (two data-parallel ranks: elements [0, 4) in file 0, [4, 9) in file 1), and box B, columns [3, 5) ([3, 2], the
// clipped last slice), in one chunk of file 1.
CheckpointIndex box_index() {
  CheckpointIndex x = valid_index();
  TensorRecord& w = x.tensors["params/w"];
  w.chunks.clear();
  auto add = [&](int file, std::uint64_t offset, std::vector<std::int64_t> box_offset,
                 std::vector<std::int64_t> box_shape, std::uint64_t begin, std::uint64_t count) {
    ChunkRecord c = chunk(file, offset, box_shape, begin, count);
    c.box_offset = std::move(box_offset);
    w.chunks.push_back(std::move(c));
  };
  add(1, 3000, {0, 3}, {3, 2}, 0, 6);  // out of order: parse() sorts by box, then begin
  add(0, 2000, {0, 0}, {3, 3}, 0, 4);
  add(1, 2000, {0, 0}, {3, 3}, 4, 5);
  return x;
}

TEST(CheckpointIndex, BoxesOfTpSlicesParseAndCover) {
  const CheckpointIndex x = box_index();
  EXPECT_EQ(x.coverage_problem(), "") << "in memory, unsorted";
  const CheckpointIndex y = CheckpointIndex::parse(x.serialize(), kWhere);
  EXPECT_EQ(y.coverage_problem(), "");
  const std::vector<ChunkRecord>& c = y.tensor("params/w").chunks;
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].box_offset, (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(c[0].begin, 0u);
  EXPECT_EQ(c[1].begin, 4u);
  EXPECT_EQ(c[2].box_offset, (std::vector<std::int64_t>{0, 3}));
  EXPECT_FALSE(c[2].whole_box(y.tensor("params/w").shape));
  EXPECT_EQ(CheckpointIndex::parse(y.serialize(), kWhere).to_json(), y.to_json());
}

TEST(CheckpointIndex, RefusesOverlappingBoxes) {
  const json good = box_index().to_json();
  json j = good;
  // Box B moved one column left: column 2 is in both boxes.
  for (json& c : j["tensors"]["params/w"]["chunks"])
    if (c["box_offset"] == json{0, 3}) c["box_offset"] = {0, 2};
  expect_refused(j,
                 "tensors[\"params/w\"] has overlapping chunks: the box at [0, 0] of shape [3, 3] and the box at "
                 "[0, 2] of shape [3, 2] intersect",
                 "boxes that intersect");
  j = good;
  // Box B as the whole tensor: it holds box A's elements too.
  for (json& c : j["tensors"]["params/w"]["chunks"])
    if (c["box_offset"] == json{0, 3}) {
      c["box_offset"] = {0, 0};
      c["box_shape"] = {3, 5};
    }
  expect_refused(j, "intersect", "a whole-tensor box beside a slice");
  j = good;
  // Inside box A: [0, 4) and [3, 8).
  for (json& c : j["tensors"]["params/w"]["chunks"])
    if (c["begin"] == 4) c["begin"] = 3;
  expect_refused(j, "has overlapping chunks at elements 0 and 3 of the box at [0, 0] of shape [3, 3]",
                 "two chunks of one box");
}

TEST(CheckpointIndex, CoverageOfBoxesFindsGapsAndOverlaps) {
  CheckpointIndex x = box_index();
  x.tensors["params/w"].chunks.erase(x.tensors["params/w"].chunks.begin());  // box B
  EXPECT_NE(x.coverage_problem().find("tensor 'params/w' has no chunk for 6 of its 15 elements (its boxes hold 9)"),
            std::string::npos)
      << x.coverage_problem();
  x = box_index();
  x.tensors["params/w"].chunks[2].count = 4;  // box A's [4, 8): element 8 missing
  EXPECT_NE(x.coverage_problem().find(
                "tensor 'params/w' has no chunk for elements [8, 9) of the box at [0, 0] of shape [3, 3]"),
            std::string::npos)
      << x.coverage_problem();
  x = box_index();
  x.tensors["params/w"].chunks[2].begin = 2;  // box A's [0, 4) and [2, 7)
  EXPECT_NE(x.coverage_problem().find(
                "tensor 'params/w' has elements from 2 of the box at [0, 0] of shape [3, 3] in two chunks"),
            std::string::npos)
      << x.coverage_problem();
  x = box_index();
  x.tensors["params/w"].chunks[0].box_offset = {0, 2};  // box B over column 2
  x.tensors["params/w"].chunks[0].box_shape = {3, 3};
  x.tensors["params/w"].chunks[0].count = 9;  // the whole box (its checksums do not matter here)
  EXPECT_NE(x.coverage_problem().find("tensor 'params/w' has elements in two chunks: the box at [0, 0] of shape "
                                      "[3, 3] and the box at [0, 2] of shape [3, 3] intersect"),
            std::string::npos)
      << x.coverage_problem();
}

// A model declares the same global model at every tp degree.
TEST(CheckpointIndex, GlobalDeclarationOfTpSlices) {
  std::vector<UnitSpec> local = test_units();
  SlotSpec& w = local[0].slots[0];
  w.tp = TpSplit{1, 1, {3, 5}};
  w.shape = w.tp.local_shape(2);
  EXPECT_EQ(w.shape, (std::vector<std::int64_t>{3, 3}));
  const std::vector<UnitSpec> global = global_declaration(local);
  EXPECT_EQ(global[0].slots[0].shape, (std::vector<std::int64_t>{3, 5}));
  EXPECT_TRUE(global[0].slots[0].tp.replicated());
  EXPECT_EQ(global[0].slots[1].shape, (std::vector<std::int64_t>{5}));
  EXPECT_NO_THROW(valid_index().check_model(global, kWhere));
  EXPECT_EQ(test::error_code_of([&] { valid_index().check_model(local, kWhere); }), ErrorCode::kMismatch)
      << "the local slice is not the checkpoint's model";
}

TEST(CheckpointIndex, CheckModelNamesTheDifference) {
  const CheckpointIndex x = valid_index();
  EXPECT_NO_THROW(x.check_model(test_units(), kWhere));
  auto refused = [&](const std::vector<UnitSpec>& units, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    std::string message;
    auto code = test::error_code_of([&] {
      try {
        x.check_model(units, kWhere);
      } catch (const Error& e) {
        message = e.what();
        throw;
      }
    });
    EXPECT_EQ(code, ErrorCode::kMismatch) << message;
    EXPECT_NE(message.find(kWhere), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << message;
  };
  std::vector<UnitSpec> u = test_units();
  u.pop_back();
  refused(u, "2 units, this model declares 1");
  u = test_units();
  u[1].name = "lm_head";
  refused(u, "its unit 1 is 'head' with 1 slots, this model's is 'lm_head' with 1");
  u = test_units();
  u[0].slots.pop_back();
  refused(u, "'embed' with 3 slots, this model's is 'embed' with 2");
  u = test_units();
  u[0].slots[0].shape = {3, 6};
  refused(u, "unit 'embed' slot 0 is 'w' [3, 5] weight_decay true trainable true there, 'w' [3, 6]");
  u = test_units();
  u[0].slots[1].trainable = true;
  refused(u,
          "'scale' [5] weight_decay false trainable false there, 'scale' [5] weight_decay false trainable true here");
  u = test_units();
  u[0].slots[0].weight_decay = false;
  refused(u, "weight_decay false trainable true here");
}

TEST(CheckpointIndex, TensorNames) {
  EXPECT_EQ(params_tensor("h.0.attn.c_attn.weight"), "params/h.0.attn.c_attn.weight");
  EXPECT_EQ(exp_avg_tensor("b"), "exp_avg/b");
  EXPECT_EQ(exp_avg_sq_tensor("b"), "exp_avg_sq/b");
}

}  // namespace
}  // namespace strata
