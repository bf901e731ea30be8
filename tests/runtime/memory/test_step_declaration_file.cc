// A step declaration as JSON (runtime/memory/step_declaration_file.h): what one writes the other reads back to the
// same prediction, and a document that is not one is refused naming the value's JSON path.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "runtime/memory/step_declaration_file.h"

namespace strata {
namespace {

// Every field away from its default, so that one dropped or misread changes a prediction or the table.
StepDeclaration sample() {
  StepDeclaration d;
  d.units = {{"a", {{"a.w", {37, 5}}, {"a.b", {5}, /*weight_decay=*/false}}},
             {"b", {{"b.w", {64}}, {"b.frozen", {7}, true, /*trainable=*/false}, {"b.empty", {0, 3}}}}};
  d.sharding.stage = ZeroStage::kGradients;
  d.sharding.mixed_precision = {DType::kBF16, DType::kBF16};
  d.sharding.reshard_after_forward = false;
  d.sharding.prefetch_depth = 2;
  d.sharding.offload = OffloadPolicy::kOptimizer;
  d.sharding.align_elements = 32;
  d.groups = DataParallelSizes{4, 2};
  d.optimizer_floats = 1;
  d.optimizer_flags = false;
  d.held = PoolPeaks{3, 2};
  d.kept_open = PoolPeaks{1, 1};
  d.add("kept activations", MemCategory::kActivations, 4096);
  d.add_host("offloaded activations", MemCategory::kActivations, 12288);
  d.add("scratch", MemCategory::kWorkspace, 100);
  return d;
}

TEST(StepDeclarationFile, WhatIsWrittenReadsBackToTheSamePrediction) {
  const StepDeclaration d = sample();
  const std::string text = step_declaration_json(d);
  const StepDeclaration back = parse_step_declaration(text, "the sample");
  EXPECT_EQ(predict_step_memory(back), predict_step_memory(d));
  EXPECT_EQ(predict_step_host_memory(back), predict_step_host_memory(d));
  EXPECT_EQ(declaration_table(back), declaration_table(d));
  EXPECT_EQ(step_declaration_json(back), text);  // every field, the units' flags and shapes included
  ASSERT_EQ(back.units.size(), 2u);
  EXPECT_FALSE(back.units[1].slots[1].trainable);
  EXPECT_FALSE(back.units[0].slots[1].weight_decay);
}

// `text` with each `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  EXPECT_NE(text.find(from), std::string::npos) << from;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// parse_step_declaration's message for `text`, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_step_declaration(text, "decl.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

std::string error_after(const std::string& from, const std::string& to) {
  return error_of(replaced(step_declaration_json(sample()), from, to));
}

TEST(StepDeclarationFile, ADocumentThatIsNotOneIsRefusedNamingTheValue) {
  EXPECT_NE(error_after("\"workspace\"", "\"scratchpad\"").find(".buffers[2].category"), std::string::npos);
  EXPECT_NE(error_after("\"bytes\": 4096", "\"bytes\": -1").find(".buffers[0].bytes"), std::string::npos);
  EXPECT_NE(error_after("\"zero_stage\": 2", "\"zero_stage\": 4").find(".sharding.zero_stage"), std::string::npos);
  EXPECT_NE(error_after("\"kept_open\"", "\"kept_opened\"").find("kept_opened"), std::string::npos);
  EXPECT_NE(error_after("strata-step-declaration", "strata-checkpoint").find(".format"), std::string::npos);
  EXPECT_NE(error_after("\"dp_shard\": 4", "\"dp_shard\": 0").find(".groups.dp_shard"), std::string::npos);
  // Each dimension fits, their product does not; nor the sum of the slots' elements.
  const std::string big = "1099511627776";  // 2^40
  EXPECT_NE(error_of(replaced(replaced(step_declaration_json(sample()), "37,\n", big + ",\n"), "\n      5\n",
                              "\n      " + big + "\n"))
                .find("overflows"),
            std::string::npos);
  EXPECT_NE(error_after("\n      64\n", "\n      9007199254740992\n").find("2^53"), std::string::npos);
  EXPECT_NE(error_after("{", "[").find("decl.json"), std::string::npos);
}

TEST(StepDeclarationFile, AFileThatCannotBeReadIsNamed) {
  try {
    read_step_declaration("/nonexistent/declaration.json");
    FAIL() << "read a file that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/declaration.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
