// Checked size arithmetic, the parsing of STRATA_* values, and the GPT's and the planner's size checks: what is
// refused, and that the message names the quantity, the variable or the flag.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/checked_math.h"
#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"
#include "models/gpt/model/gpt_model.h"
#include "runtime/memory/memory_planner.h"

namespace strata {
namespace {

// The message of the strata::Error `f` throws ("" when it throws none, so a missing throw fails the match).
// Whether `text` holds `fragment`, printing both when it does not.
testing::AssertionResult contains(const std::string& text, const std::string& fragment) {
  if (text.find(fragment) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << fragment << "' not in '" << text << "'";
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(CheckedMath, ProductsThatFitAreExact) {
  EXPECT_EQ(checked_mul<int>(46340, 46340, "x"), 46340 * 46340);
  EXPECT_EQ(checked_add<std::uint64_t>(std::uint64_t{1} << 63, (std::uint64_t{1} << 63) - 1, "x"),
            std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(checked_product("x", 4, 1024, 1024, 1024), std::uint64_t{1} << 32);
  EXPECT_EQ(checked_product("x", 0, std::numeric_limits<std::int64_t>::max()), 0u);
}

TEST(CheckedMath, OverflowNamesTheQuantityAndItsFactors) {
  EXPECT_TRUE(contains(error_of([] { checked_mul<int>(2000000000, 8, "tokens (--batch x --seq)"); }),
              "tokens (--batch x --seq) = 2000000000 x 8 overflows a 32-bit signed integer"));
  EXPECT_TRUE(contains(error_of([] { checked_add<std::size_t>(std::numeric_limits<std::size_t>::max(), 1, "bytes"); }),
              "bytes = 18446744073709551615 + 1 overflows a 64-bit unsigned integer"));
  EXPECT_TRUE(contains(error_of([] { checked_product("params", 12, 2000000000, 2000000000); }),
              "params = 12 x 2000000000 x 2000000000 overflows a 64-bit unsigned integer"));
  EXPECT_TRUE(contains(error_of([] { checked_product("rows", 4, -1); }), "rows = 4 x -1 has a negative"));
  EXPECT_TRUE(contains(error_of([] { check_addressable(kMaxAddressableBytes + 1, "the logits"); }),
              "the logits would take"));
  EXPECT_NO_THROW(check_addressable(kMaxAddressableBytes, "x"));
}

TEST(EnvParsing, SecondsMustBeFiniteAndBounded) {
  EXPECT_DOUBLE_EQ(parse_seconds("600", "STRATA_TIMEOUT_S"), 600.0);
  EXPECT_DOUBLE_EQ(parse_seconds("1e7", "STRATA_TIMEOUT_S"), 1e7);
  for (const char* bad : {"inf", "nan", "1e300", "1e7.5", "0", "-3", "", "10s", "1e8"})
    EXPECT_TRUE(contains(error_of([&] { parse_seconds(bad, "STRATA_TIMEOUT_S"); }),
                std::string("STRATA_TIMEOUT_S='") + bad + "' must be a number of seconds > 0 and "
                                   "<= 1e+07"))
        << bad;
}

TEST(EnvParsing, BytesMustBeFiniteAndFit) {
  EXPECT_EQ(parse_bytes("512MiB", "STRATA_DEVICE_MEMORY"), std::size_t{512} << 20);
  EXPECT_EQ(parse_bytes("0", "STRATA_DEVICE_MEMORY"), 0u);
  for (const char* bad : {"inf", "nan", "-1", "GB", ""})
    EXPECT_TRUE(contains(error_of([&] { parse_bytes(bad, "STRATA_DEVICE_MEMORY"); }),
                "must be a finite size in bytes"))
        << bad;
  EXPECT_TRUE(contains(error_of([] { parse_bytes("1e30GB", "STRATA_DEVICE_MEMORY"); }),
              "more than a 64-bit size can hold"));
  EXPECT_TRUE(contains(error_of([] { parse_bytes("16777216T", "STRATA_DEVICE_MEMORY"); }),
              "more than a 64-bit size can hold"));  // 2^64 exactly
  EXPECT_TRUE(contains(error_of([] { parse_bytes("3XB", "STRATA_DEVICE_MEMORY"); }), "unknown unit 'XB'"));
}

TEST(EnvParsing, LogLevelsAndRanks) {
  for (const char* good : {"info", "WARN", "off", "info,comm=debug", "warn,shard=trace,mem=error", "gpt=debug"})
    EXPECT_NO_THROW(check_log_levels(good, "STRATA_LOG_LEVEL")) << good;
  EXPECT_TRUE(contains(error_of([] { check_log_levels("verbose", "STRATA_LOG_LEVEL"); }),
              "STRATA_LOG_LEVEL='verbose': 'verbose' is not a level"));
  EXPECT_TRUE(contains(error_of([] { check_log_levels("info,com=debug", "STRATA_LOG_LEVEL"); }),
              "there is no logger 'com'"));
  EXPECT_TRUE(contains(error_of([] { check_log_levels("info,comm=loud", "STRATA_LOG_LEVEL"); }),
              "'loud' is not a level"));
  for (const char* good : {"all", "*", "0", "0,3", "12"}) EXPECT_NO_THROW(check_log_ranks(good, "STRATA_LOG_RANKS"));
  for (const char* bad : {"x", "0,x", "-1", "01", "0,,1", ",", "1.5", "every"})
    EXPECT_TRUE(contains(error_of([&] { check_log_ranks(bad, "STRATA_LOG_RANKS"); }), "STRATA_LOG_RANKS='"))
        << bad;
  // Every logger the project creates must be in the list, or naming it in STRATA_LOG_LEVEL would be refused.
  for (const std::string& name : logger_names()) EXPECT_NO_THROW(check_log_levels("info," + name + "=debug", "x"));
}

TEST(GptSizes, RealModelsPassAndWrappedSizesAreNamed) {
  gpt::GptConfig gpt2{12, 12, 768, 50257, 1024};
  EXPECT_NO_THROW(gpt2.validate_sizes(8, 1024, 1));
  gpt::GptConfig xl{48, 25, 1600, 65536, 1024};
  EXPECT_NO_THROW(xl.validate_sizes(4, 1024, 1));
  gpt::GptConfig wide{2, 1, 2000000000, 64, 16};
  EXPECT_TRUE(contains(error_of([&] { wide.validate_sizes(4, 8, 1); }), "--embd"));
  gpt::GptConfig small;
  EXPECT_TRUE(contains(error_of([&] { small.validate_sizes(2000000000, 8, 1); }),
              "tokens per micro-batch (--batch x --seq) = 2000000000 x 8 overflows"));
  // Fits every integer type, but not any address space: refused before an allocation is attempted.
  gpt::GptConfig huge{2, 1, 1 << 20, 64, 16};
  EXPECT_TRUE(contains(error_of([&] { huge.validate_sizes(4, 8, 1); }), "more than any process can address"));
}

PlanInput gpt2_plan() {
  PlanInput in;
  in.model = ModelShape{0, 12, 768, 12, 50257, 1024};
  return in;
}

TEST(PlanInputValidate, AcceptsGpt2AndNamesTheFlagsOfEachBadCombination) {
  EXPECT_NO_THROW(gpt2_plan().validate());
  struct Case {
    const char* fragment;
    void (*edit)(PlanInput&);
  };
  const Case cases[] = {
      {"--heads 5 must divide --hidden 768", [](PlanInput& in) { in.model.heads = 5; }},
      {"--tp 5 must divide --heads 12", [](PlanInput& in) { in.layout.tp = 5; }},
      {"--seq 1023 must divide by --tp 2", [](PlanInput& in) {
         in.layout.tp = 2;
         in.layout.sequence_parallel = true;
         in.model.seq = 1023;
       }},
      {"--sequence-parallel needs --tp 2", [](PlanInput& in) { in.layout.sequence_parallel = true; }},
      {"--pp 16 pipeline stages for --layers 12", [](PlanInput& in) {
         in.layout.pp = 16;
         in.hardware.devices_per_node = 16;
       }},
      {"--dp-replicate 3 must divide --dp 4", [](PlanInput& in) {
         in.layout.dp = 4;
         in.layout.dp_replicate = 3;
       }},
      {"--offload optimizer+params needs --zero-stage 3", [](PlanInput& in) {
         in.layout.stage = ZeroStage::kGradients;
         in.offload = OffloadPolicy::kOptimizerAndParams;
       }},
      {"= 16 devices, but --nodes 1 x --devices-per-node 8", [](PlanInput& in) { in.layout.dp = 16; }},
      {"--link-gbs -1", [](PlanInput& in) { in.hardware.link_gbs = -1; }},
      {"--tflops nan", [](PlanInput& in) { in.hardware.peak_tflops = std::numeric_limits<double>::quiet_NaN(); }},
      {"--params inf", [](PlanInput& in) { in.model.params = std::numeric_limits<double>::infinity(); }},
      {"--device-memory must be more than 0", [](PlanInput& in) { in.hardware.device_memory = 0; }},
      {"at most 16777216 are supported", [](PlanInput& in) {
         in.layout.dp = 1 << 20;
         in.layout.tp = 1 << 12;
       }},
      {"--vocab -1", [](PlanInput& in) { in.model.vocab = -1; }},
  };
  for (const Case& c : cases) {
    PlanInput in = gpt2_plan();
    c.edit(in);
    EXPECT_TRUE(contains(error_of([&] { in.validate(); }), c.fragment)) << c.fragment;
    EXPECT_THROW(plan_memory(in), Error) << c.fragment;
  }
}

}  // namespace
}  // namespace strata
