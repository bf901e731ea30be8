// check_config_agreement: the message names each differing setting, its values and the ranks holding each; the
// exchange passes when ranks agree and fails on every rank when one rank differs.
#include "runtime/bootstrap/config_agreement.h"

#include <string>
#include <vector>

#include "collectives/rank_values.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using Fields = std::vector<ConfigField>;

TEST(ConfigAgreement, MessageNamesFieldValuesAndRanks) {
  Fields a{{"--lr", "0.001"}, {"--steps", "20"}};
  Fields b{{"--lr", "0.002"}, {"--steps", "20"}};
  EXPECT_EQ(describe_config_differences({a, b, a}),
            "configuration differs across ranks: --lr: 0.001 on ranks 0,2; 0.002 on rank 1");
  EXPECT_EQ(describe_config_differences({a, a, a}), "");
  EXPECT_EQ(describe_config_differences({a}), "");
  Fields c{{"--lr", "0.001"}, {"--steps", "19"}};
  EXPECT_EQ(describe_config_differences({a, b, c, a}),
            "configuration differs across ranks in 2 settings:\n"
            "  --lr: 0.001 on ranks 0,2,3; 0.002 on rank 1\n"
            "  --steps: 20 on ranks 0,1,3; 19 on rank 2");
}

TEST(ConfigAgreement, DifferentSettingListsAreNamed) {
  Fields a{{"program", "train_gpt"}, {"--lr", "0.001"}};
  Fields b{{"program", "custom_trainer"}, {"--hidden", "64"}, {"--lr", "0.001"}};
  std::string m = describe_config_differences({a, b});
  EXPECT_NE(m.find("the ranks list different settings"), std::string::npos) << m;
  EXPECT_NE(m.find("2 settings on rank 0; 3 settings (setting 1 is '--hidden') on rank 1"), std::string::npos) << m;
}

TEST(ConfigAgreement, RankLists) {
  EXPECT_EQ(describe_ranks({1}), "rank 1");
  EXPECT_EQ(describe_ranks({0, 1}), "ranks 0,1");
  EXPECT_EQ(describe_ranks({0, 1, 2, 3, 5, 7, 8}), "ranks 0-3,5,7,8");
}

TEST(ConfigAgreement, AgreeingRanksPass) {
  EXPECT_NO_THROW(check_config_agreement({{"--lr", "0.001"}, {"--data", std::string(500, 'x')}}));
}

TEST(ConfigAgreement, OneDifferingRankFailsEveryRank) {
  const Runtime& rt = test::runtime();
  if (rt.world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int odd = rt.world_size() - 1;
  // A long value that differs only after the part that is sent: the hash still tells them apart.
  std::string path(300, 'p');
  if (rt.rank() == odd) path += "q";
  Fields mine{{"--lr", rt.rank() == odd ? "0.002" : "0.001"}, {"--steps", "20"}, {"--data", path}};
  try {
    check_config_agreement(mine);
    ADD_FAILURE() << "no error on rank " << rt.rank();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    std::string m = e.what();
    std::string others = odd == 1 ? "rank 0" : fmt::format("ranks 0-{}", odd - 1);
    if (odd == 2) others = "ranks 0,1";
    EXPECT_NE(m.find(fmt::format("--lr: 0.001 on {}; 0.002 on rank {}", others, odd)), std::string::npos) << m;
    EXPECT_NE(m.find("--data: "), std::string::npos) << m;
    EXPECT_EQ(m.find("--steps"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace strata
