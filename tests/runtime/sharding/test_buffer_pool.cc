// BufferPool and PooledBuffer tests (CPU backend, local to each rank): slots allocated up front and counted in the
// ledger, reuse without allocation, growth, a double release, the stream order a release hands to the next acquirer;
// and plan_pools' pools and initial slot counts for every stage and offload combination.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/device_registry.h"
#include "core/error.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/unit_placement.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

// A CPU device of its own, so the ledger holds only what a test allocates.
std::unique_ptr<Device> fresh_device() { return create_device(DeviceKind::kCpu, 0, runtime().device().timeout_s()); }

std::size_t ledger_total(const Device& dev) {
  std::size_t total = 0;
  for (std::size_t c = 0; c < kNumMemCategories; ++c) total += dev.memory_stats().current(static_cast<MemCategory>(c));
  return total;
}

TEST(BufferPool, InitialSlotsAreAllocatedUpFrontInTheirCategory) {
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{1000}}) {
    for (int initial : {0, 1, 3}) {
      SCOPED_TRACE(fmt::format("slot bytes {}, initial slots {}", bytes, initial));
      auto dev = fresh_device();
      const std::size_t slot = std::max(bytes, BufferPool::kMinSlotBytes);
      {
        BufferPool pool(*dev, "p", MemCategory::kUnshardedGrads, bytes, initial);
        EXPECT_EQ(pool.slot_bytes(), slot);
        EXPECT_EQ(pool.slots(), initial);
        EXPECT_EQ(pool.allocations(), initial);
        EXPECT_EQ(pool.in_use(), 0);
        EXPECT_EQ(dev->memory_stats().current(MemCategory::kUnshardedGrads), static_cast<std::size_t>(initial) * slot);
        EXPECT_EQ(ledger_total(*dev), static_cast<std::size_t>(initial) * slot) << "bytes outside the category";
        EXPECT_EQ(dev->memory_stats().allocations(), static_cast<std::size_t>(initial));
      }
      EXPECT_EQ(ledger_total(*dev), 0u) << "the pool's slots outlived it";
    }
  }
}

TEST(BufferPool, ReleasedSlotsAreReusedWithoutAllocating) {
  auto dev = fresh_device();
  BufferPool pool(*dev, "p", MemCategory::kCommBuffer, 256, 2);
  std::set<void*> initial;
  for (int k = 0; k < 2; ++k) initial.insert(pool.acquire());
  EXPECT_EQ(initial.size(), 2u);
  for (void* p : initial) pool.release(p);
  const std::size_t allocations = dev->memory_stats().allocations();
  for (int round = 0; round < 50; ++round) {
    void* a = pool.acquire();
    void* b = pool.acquire();
    EXPECT_NE(a, b);
    EXPECT_TRUE(initial.count(a) && initial.count(b)) << "round " << round << ": a slot that is not an initial one";
    EXPECT_EQ(pool.in_use(), 2);
    pool.release(b);
    pool.release(a);
  }
  EXPECT_EQ(dev->memory_stats().allocations(), allocations);
  EXPECT_EQ(pool.allocations(), 2);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(BufferPool, GrowsOnlyWhenMoreAreInUseAtOnce) {
  auto dev = fresh_device();
  BufferPool pool(*dev, "p", MemCategory::kUnshardedParams, 100, 1);
  const std::size_t slot = pool.slot_bytes();
  std::vector<void*> held;
  for (int k = 0; k < 3; ++k) held.push_back(pool.acquire());
  EXPECT_EQ(std::set<void*>(held.begin(), held.end()).size(), 3u) << "two users were handed the same slot";
  EXPECT_EQ(pool.allocations(), 3);
  EXPECT_EQ(pool.slots(), 3);
  EXPECT_EQ(pool.in_use(), 3);
  EXPECT_EQ(dev->memory_stats().current(MemCategory::kUnshardedParams), 3 * slot);
  for (void* p : held) pool.release(p);
  EXPECT_EQ(pool.in_use(), 0);
  EXPECT_EQ(dev->memory_stats().current(MemCategory::kUnshardedParams), 3 * slot) << "a pool never frees a slot";
  // The steady state: three at once again allocates nothing.
  const std::size_t allocations = dev->memory_stats().allocations();
  held.clear();
  for (int k = 0; k < 3; ++k) held.push_back(pool.acquire());
  for (void* p : held) pool.release(p);
  EXPECT_EQ(dev->memory_stats().allocations(), allocations);
  EXPECT_EQ(pool.allocations(), 3);
}

TEST(BufferPool, DoubleReleaseIsAClearError) {
  auto dev = fresh_device();
  BufferPool pool(*dev, "grads", MemCategory::kCommBuffer, 64, 2);
  void* p = pool.acquire();
  pool.release(p);
  try {
    pool.release(p);
    ADD_FAILURE() << "a double release was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("pool 'grads': slot released twice"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.in_use(), 0) << "the refused release changed the pool";
  pool.release(nullptr);  // nothing to return
  EXPECT_EQ(pool.in_use(), 0);
  EXPECT_EQ(pool.slots(), 2);
}

// A pointer that was never one of the pool's slots is refused (it would otherwise reach the next acquirer and make
// in_use() negative).
TEST(BufferPool, ReleasingAForeignPointerIsAClearError) {
  auto dev = fresh_device();
  BufferPool pool(*dev, "p", MemCategory::kCommBuffer, 64, 1);
  Buffer foreign = dev->allocate(64, MemCategory::kWorkspace);
  EXPECT_THROW(pool.release(foreign.data()), Error);
  EXPECT_EQ(pool.in_use(), 0);
}

// A slot released with a stream event makes its next acquirer's stream wait for the work enqueued before the release.
// The writer's stream sleeps before it writes, so a reader that did not wait would see the slot unwritten.
TEST(BufferPool, ReleaseAfterAStreamOrdersTheNextUser) {
  auto dev = fresh_device();
  BufferPool pool(*dev, "p", MemCategory::kCommBuffer, 64, 1);
  std::unique_ptr<Stream> writer = dev->create_stream("writer"), reader = dev->create_stream("reader");
  for (int round = 1; round <= 3; ++round) {
    int* slot = static_cast<int*>(pool.acquire(reader.get()));
    *slot = 0;
    writer->enqueue_host([slot, round] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      *slot = round;
    });
    pool.release(slot, writer.get());
    std::atomic<int> seen{-1};
    int* again = static_cast<int*>(pool.acquire(reader.get()));
    EXPECT_EQ(again, slot) << "a pool of one slot handed out another";
    reader->enqueue_host([again, &seen] { seen = *again; });
    reader->synchronize();
    EXPECT_EQ(seen.load(), round) << "the next user's stream read the slot before the releasing stream's write";
    writer->synchronize();
    pool.release(again, reader.get());
  }
  // The compute stream is the caller: acquiring for it blocks the caller until the released work is done.
  int* slot = static_cast<int*>(pool.acquire());
  *slot = 0;
  writer->enqueue_host([slot] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    *slot = 42;
  });
  pool.release(slot, writer.get());
  int* again = static_cast<int*>(pool.acquire(&dev->compute_stream()));
  EXPECT_EQ(*again, 42) << "acquire for the compute stream returned before the releasing stream's write";
  pool.release(again);
  writer->synchronize();
}

TEST(PooledBuffer, OwnBorrowRelease) {
  auto dev = fresh_device();
  BufferPool pool(*dev, "p", MemCategory::kUnshardedGrads, 128, 1);
  PooledBuffer b;
  EXPECT_FALSE(b);
  EXPECT_EQ(b.data(), nullptr);
  b.release();  // releasing nothing is a no-op
  EXPECT_FALSE(b);

  // Owned: the buffer is freed by release().
  Buffer owned = dev->allocate(256, MemCategory::kMaster);
  void* owned_data = owned.data();
  b.own(std::move(owned));
  EXPECT_TRUE(b);
  EXPECT_EQ(b.data(), owned_data);
  EXPECT_EQ(dev->memory_stats().current(MemCategory::kMaster), 256u);
  b.release();
  EXPECT_FALSE(b);
  EXPECT_EQ(dev->memory_stats().current(MemCategory::kMaster), 0u);

  // A zero-byte owned buffer still counts as held.
  b.own(dev->allocate(0, MemCategory::kMaster));
  EXPECT_TRUE(b);
  b.release();
  EXPECT_FALSE(b);

  // Borrowed: the slot returns to its pool, nothing is freed.
  const std::size_t grads = dev->memory_stats().current(MemCategory::kUnshardedGrads);
  b.borrow(pool);
  EXPECT_TRUE(b);
  EXPECT_NE(b.data(), nullptr);
  EXPECT_EQ(pool.in_use(), 1);
  b.release();
  EXPECT_FALSE(b);
  EXPECT_EQ(pool.in_use(), 0);
  b.release();  // a second release is a no-op, not a double release
  EXPECT_EQ(pool.in_use(), 0);
  EXPECT_EQ(dev->memory_stats().current(MemCategory::kUnshardedGrads), grads);

  // Borrowing again, or owning, returns what was held first.
  b.borrow(pool);
  b.borrow(pool);
  EXPECT_EQ(pool.in_use(), 1);
  EXPECT_EQ(pool.allocations(), 1) << "the second borrow did not return the first slot";
  b.own(dev->allocate(32, MemCategory::kMaster));
  EXPECT_EQ(pool.in_use(), 0);
  EXPECT_EQ(dev->memory_stats().current(MemCategory::kMaster), 32u);
  b.borrow(pool);
  EXPECT_EQ(dev->memory_stats().current(MemCategory::kMaster), 0u) << "borrowing kept the owned buffer";
  b.release();
  EXPECT_EQ(pool.in_use(), 0);
}

// ---- plan_pools ---------------------------------------------------------------------------------------------------

// What each configuration pools, written from docs/embedding.md ("What each ZeroStage keeps"),
// docs/notes/prefetch.md and docs/notes/offload.md rather than from UnitPlacement: the buffer, its category and memory,
// its slot size in elements of the padded unit (P) or the shard (S) and dtype, and the initial slots.
struct ExpectedPool {
  UnitBuffer buffer;
  MemCategory category;
  Memory memory;
  bool padded;  // P elements, else S
  DType dtype;
  int initial;
};

std::vector<ExpectedPool> expected_pools(const ShardingOptions& o) {
  const DType pdt = o.mixed_precision.param_dtype, rdt = o.mixed_precision.reduce_dtype;
  const bool zero3 = o.stage == ZeroStage::kParameters, offload = o.offload != OffloadPolicy::kNone;
  const bool offload_params = o.offload == OffloadPolicy::kOptimizerAndParams;
  const int gathers = o.prefetch_depth + 1;  // the unit computing and the ones prefetched
  std::vector<ExpectedPool> out;
  if (zero3)
    out.push_back({UnitBuffer::kUnshardedParams, MemCategory::kUnshardedParams, Memory::kDevice, true, pdt, gathers});
  if (o.stage == ZeroStage::kGradients || zero3)
    out.push_back({UnitBuffer::kUnshardedGrads, MemCategory::kUnshardedGrads, Memory::kDevice, true, pdt, 2});
  if (rdt != pdt) out.push_back({UnitBuffer::kReduceIn, MemCategory::kCommBuffer, Memory::kDevice, true, rdt, 2});
  out.push_back({UnitBuffer::kReduceOut, MemCategory::kCommBuffer, Memory::kDevice, false, rdt, 2});
  if (offload_params)
    out.push_back({UnitBuffer::kStagedShard, MemCategory::kParamShard, Memory::kDevice, false, pdt, gathers});
  if (offload) out.push_back({UnitBuffer::kGradReturn, MemCategory::kCommBuffer, Memory::kHost, false, rdt, 2});
  if (offload && !offload_params && pdt != DType::kF32)
    out.push_back({UnitBuffer::kUploadSlot, MemCategory::kCommBuffer, Memory::kHost, false, pdt, 2});
  return out;
}

TEST(PlanPools, OnePoolPerPooledBufferSizedForTheLargestUnit) {
  // Three units, the largest in the middle (so neither the first nor the last sizes the pools), one of them empty.
  const std::vector<std::vector<SlotSpec>> units = {
      {{"a", {3, 5}}}, {{"b", {17, 9}}, {"c", {0}}, {"d", {4}, false, false}}, {{"empty", {0}}}};
  const int shard_world = 3;
  int checked = 0;
  for (int stage = 0; stage <= 3; ++stage)
    for (DType pdt : {DType::kF32, DType::kBF16})
      for (DType rdt : {DType::kF32, DType::kBF16})
        for (OffloadPolicy off : {OffloadPolicy::kNone, OffloadPolicy::kOptimizer, OffloadPolicy::kOptimizerAndParams})
          for (int depth : {0, 1, 3}) {
            ShardingOptions o;
            o.stage = zero_stage_from_int(stage);
            o.mixed_precision = {pdt, rdt};
            o.offload = off;
            o.prefetch_depth = depth;
            if (off == OffloadPolicy::kOptimizerAndParams && stage != 3) continue;
            SCOPED_TRACE(o.describe());
            std::vector<UnitPlacement> placements;
            std::size_t max_p = 0, max_s = 0;
            for (const auto& slots : units) {
              ShardLayout layout(slots, stage == 0 ? 1 : shard_world, o.align_elements);
              placements.emplace_back(layout, o);
              max_p = std::max(max_p, layout.padded_numel());
              max_s = std::max(max_s, layout.shard_numel());
            }
            const std::vector<PoolPlan> got = plan_pools(placements, o);
            const std::vector<ExpectedPool> want = expected_pools(o);
            EXPECT_EQ(got.size(), want.size());
            for (std::size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
              const ExpectedPool& w = want[k];
              SCOPED_TRACE(unit_buffer_name(w.buffer));
              EXPECT_EQ(got[k].buffer, w.buffer) << "got " << unit_buffer_name(got[k].buffer);
              EXPECT_EQ(got[k].category, w.category);
              EXPECT_EQ(got[k].memory, w.memory);
              EXPECT_EQ(got[k].slot_bytes,
                        std::max((w.padded ? max_p : max_s) * dtype_size(w.dtype), BufferPool::kMinSlotBytes));
              EXPECT_EQ(got[k].initial_slots, w.initial);
              ++checked;
            }
          }
  EXPECT_GT(checked, 0);
}

TEST(PlanPools, NoUnitsNoPoolsAndEmptyUnitsGetTheMinimumSlot) {
  ShardingOptions o;
  EXPECT_TRUE(plan_pools({}, o).empty());
  const std::vector<UnitPlacement> empty{UnitPlacement(ShardLayout({{"z", {0}}}, 2, o.align_elements), o)};
  const std::vector<PoolPlan> pools = plan_pools(empty, o);
  EXPECT_FALSE(pools.empty());
  for (const PoolPlan& p : pools) EXPECT_EQ(p.slot_bytes, BufferPool::kMinSlotBytes) << unit_buffer_name(p.buffer);
}

}  // namespace
}  // namespace strata
