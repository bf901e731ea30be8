// SelfCommunicator, the group of one rank: every collective leaves recv equal to send (in place: untouched), a batch
// pairs each send to self with the recv of its order, and what a group of one cannot do is refused by name.
// Single-process checks on a CPU device of the test's own (cheap at every np).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/self_communicator.h"
#include "core/cpu_device.h"
#include "core/error.h"

namespace strata {
namespace {

std::vector<float> values(std::size_t n, float base) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i) * 0.25f;
  return v;
}

TEST(SelfCommunicator, CollectivesAreTheIdentity) {
  CpuDevice dev(10.0, "self-test");
  SelfCommunicator self(dev, "solo");
  EXPECT_EQ(self.rank(), 0);
  EXPECT_EQ(self.size(), 1);
  Stream& s = dev.compute_stream();
  const std::vector<float> in = values(37, 1.5f);
  for (int op = 0; op < 4; ++op) {
    std::vector<float> out(in.size(), -7.0f);
    switch (op) {
      case 0: self.all_gather(in.data(), out.data(), in.size(), DType::kF32, s); break;
      case 1: self.reduce_scatter(in.data(), out.data(), in.size(), DType::kF32, ReduceOp::kAvg, s); break;
      case 2: self.all_reduce(in.data(), out.data(), in.size(), DType::kF32, ReduceOp::kSum, s); break;
      case 3: self.broadcast(in.data(), out.data(), in.size(), DType::kF32, 0, s); break;
    }
    s.synchronize();
    EXPECT_EQ(out, in) << "collective " << op;
  }
  std::vector<float> inplace = in;
  self.all_reduce(inplace.data(), inplace.data(), inplace.size(), DType::kF32, ReduceOp::kMax, s);
  s.synchronize();
  EXPECT_EQ(inplace, in);
}

TEST(SelfCommunicator, BatchPairsSendsWithRecvsInOrder) {
  CpuDevice dev(10.0, "self-test");
  SelfCommunicator self(dev);
  Stream& s = dev.compute_stream();
  const std::vector<float> a = values(5, 1), b = values(9, 100);
  std::vector<float> ra(5, 0), rb(9, 0);
  self.batch_send_recv({P2POp::send(a.data(), a.size(), DType::kF32, 0), P2POp::recv(ra.data(), 5, DType::kF32, 0),
                        P2POp::send(b.data(), b.size(), DType::kF32, 0), P2POp::recv(rb.data(), 9, DType::kF32, 0)},
                       s);
  s.synchronize();
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message([&] {
        self.batch_send_recv({P2POp::send(a.data(), 5, DType::kF32, 0), P2POp::recv(rb.data(), 9, DType::kF32, 0)}, s);
      }).find("send 0 of 5 elements, its recv of 9"),
      std::string::npos);
  EXPECT_NE(message([&] { self.batch_send_recv({P2POp::send(a.data(), 5, DType::kF32, 1)}, s); }).find("peer 1"),
            std::string::npos);
  EXPECT_NE(message([&] { self.send(a.data(), 5, DType::kF32, 0, s); }).find("needs its recv in the same"),
            std::string::npos);
}

TEST(SelfCommunicator, SplitNamesTheChildOrOptsOut) {
  CpuDevice dev(10.0, "self-test");
  SelfCommunicator self(dev, "solo");
  EXPECT_EQ(self.split(-1, 0), nullptr);
  const std::unique_ptr<Communicator> child = self.split(3, 0, "tied");
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->name(), "solo/tied");
  EXPECT_EQ(child->size(), 1);
  EXPECT_STREQ(child->backend_name(), "self");
}

}  // namespace
}  // namespace strata
