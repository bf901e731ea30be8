// Env tests: parsing of STRATA_* values, size and time units, and the rank filter of STRATA_LOG_RANKS.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"

namespace strata {
namespace {

TEST(Env, ParsesSizesAndSeconds) {
  EXPECT_EQ(parse_bytes("80GB", "x"), 80ull << 30);
  EXPECT_EQ(parse_bytes("512MiB", "x"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1K", "x"), 1024u);
  EXPECT_EQ(parse_bytes("123", "x"), 123u);
  EXPECT_DOUBLE_EQ(parse_seconds("2.5", "x"), 2.5);
  EXPECT_THROW(parse_bytes("12 parsecs", "X"), Error);
  EXPECT_THROW(parse_seconds("-1", "X"), Error);
  try {
    parse_seconds("soon", "STRATA_TIMEOUT_S");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("STRATA_TIMEOUT_S='soon'"), std::string::npos) << e.what();
  }
}

TEST(Env, ReadsTheEnvironment) {
  setenv("STRATA_BACKEND", "cpu", 1);
  setenv("STRATA_TIMEOUT_S", "7", 1);
  setenv("STRATA_DEVICE_MEMORY", "2G", 1);
  Env e = Env::from_environment();
  EXPECT_EQ(e.backend, "cpu");
  EXPECT_DOUBLE_EQ(e.timeout_s, 7.0);
  EXPECT_EQ(e.device_memory, 2ull << 30);
  setenv("STRATA_BACKEND", "tpu", 1);
  EXPECT_THROW(Env::from_environment(), Error);
  setenv("STRATA_VALIDATE", "maybe", 1);
  unsetenv("STRATA_BACKEND");
  EXPECT_THROW(Env::from_environment(), Error);
  unsetenv("STRATA_VALIDATE");
  unsetenv("STRATA_TIMEOUT_S");
  unsetenv("STRATA_DEVICE_MEMORY");
}

// STRATA_COMM picks the communicator; anything but its four values is refused, naming the variable and the choices.
TEST(Env, CommunicatorChoice) {
  unsetenv("STRATA_COMM");
  EXPECT_EQ(Env::from_environment().comm, "auto");
  for (const char* v : {"auto", "nccl", "mpi", "mpi-staged"}) {
    setenv("STRATA_COMM", v, 1);
    EXPECT_EQ(Env::from_environment().comm, v);
  }
  setenv("STRATA_COMM", "mpi", 1);
  EXPECT_NE(Env::from_environment().describe().find("STRATA_COMM=mpi "), std::string::npos);
  setenv("STRATA_COMM", "bogus", 1);
  try {
    Env::from_environment();
    ADD_FAILURE() << "STRATA_COMM=bogus accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("STRATA_COMM='bogus' must be auto, nccl, mpi or mpi-staged"),
              std::string::npos)
        << e.what();
  }
  unsetenv("STRATA_COMM");
}

TEST(Env, LogRanksFilter) {
  EXPECT_TRUE(rank_is_listed("all", 5));
  EXPECT_TRUE(rank_is_listed("0,3", 3));
  EXPECT_FALSE(rank_is_listed("0,3", 1));
  EXPECT_FALSE(rank_is_listed("13", 1));
}

}  // namespace
}  // namespace strata
