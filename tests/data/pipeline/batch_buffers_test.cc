// Batch buffers recycled through BatchBufferPool (src/data/batch_buffers.h), and the fused
// map-and-batch stage that uses it: a batch the consumer still holds is never reused, recycled
// memory gives the same batches as fresh memory, and the free list stays within its cap.
#include "data/batch_buffers.h"

#include <gtest/gtest.h>

#include <vector>

#include "data/nodes.h"
#include "kiln/data/map_into.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using ::kiln::data::testing::AsInt64;
using ::kiln::data::testing::CollectAll;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kRecycles = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kRecycles = false;
#else
constexpr bool kRecycles = true;
#endif
#else
constexpr bool kRecycles = true;
#endif

// 3 MiB of floats: above the pool's 2 MiB threshold.
const Shape kLarge{768, 1024};

TEST(BatchBufferPoolTest, AReleasedBlockIsTakenAgain) {
  auto pool = BatchBufferPool::Create();
  const void* first = nullptr;
  {
    Tensor t = *pool->Allocate(DType::kFloat32, kLarge);
    EXPECT_EQ(t.shape(), kLarge);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % (2 << 20), 0u);  // huge-page aligned
    first = t.raw_data();
    t.data<float>()[kLarge.num_elements() - 1] = 1.0f;  // the whole size is writable
  }
  Tensor again = *pool->Allocate(DType::kFloat32, kLarge);
  if (kRecycles) {
    EXPECT_EQ(again.raw_data(), first);
    EXPECT_EQ(pool->blocks_mapped(), 1);
  } else {
    EXPECT_EQ(pool->blocks_mapped(), 2);
  }
}

TEST(BatchBufferPoolTest, ABlockInUseIsNotHandedOutAgain) {
  auto pool = BatchBufferPool::Create();
  Tensor a = *pool->Allocate(DType::kFloat32, kLarge);
  Tensor view = a.Slice(1, 2);  // a view keeps the block as much as the tensor does
  a = Tensor();
  Tensor b = *pool->Allocate(DType::kFloat32, kLarge);
  EXPECT_NE(b.raw_data(), view.raw_data());
  EXPECT_EQ(pool->blocks_mapped(), 2);
}

TEST(BatchBufferPoolTest, TheFreeListIsCapped) {
  auto pool = BatchBufferPool::Create(/*max_free=*/2);
  std::vector<Tensor> live;
  for (int i = 0; i < 5; ++i) live.push_back(*pool->Allocate(DType::kFloat32, kLarge));
  live.clear();
  EXPECT_EQ(pool->free_blocks(), kRecycles ? 2 : 0);
}

TEST(BatchBufferPoolTest, SmallAndStringTensorsAreOrdinary) {
  auto pool = BatchBufferPool::Create();
  Tensor small = *pool->Allocate(DType::kInt64, Shape{64});
  Tensor strings = *pool->Allocate(DType::kString, Shape{1 << 20});
  EXPECT_EQ(small.shape(), Shape{64});
  EXPECT_TRUE(strings.data<std::string>()[(1 << 20) - 1].empty());
  EXPECT_EQ(pool->blocks_mapped(), 0);
}

TEST(BatchBufferPoolTest, AnOverflowingShapeIsAnError) {
  auto pool = BatchBufferPool::Create();
  EXPECT_FALSE(pool->Allocate(DType::kFloat32, Shape{int64_t{1} << 40, int64_t{1} << 30}).ok());
}

// v -> [768, 1024] floats, every one equal to v, written into the batch slot when the stage
// offers one (MapIntoFn) and computed apart otherwise.
MapIntoFn FilledFn() {
  auto fill = [](Tensor t, int64_t v) {
    for (float& x : t.span<float>()) x = static_cast<float>(v);
  };
  MapIntoFn fn;
  fn.fn = [fill](Element e) -> absl::StatusOr<Element> {
    const int64_t v = AsInt64(e);
    Tensor t(DType::kFloat32, kLarge);
    fill(t, v);
    return Element({Tensor::Scalar<int64_t>(v), t});
  };
  fn.into = [fill](Element e, SlotAllocator allocate) -> absl::StatusOr<Element> {
    const int64_t v = AsInt64(e);
    absl::StatusOr<Tensor> slot = allocate(1, DType::kFloat32, kLarge);
    if (!slot.ok()) return slot.status();
    fill(*slot, v);
    return Element({Tensor::Scalar<int64_t>(v), *slot});
  };
  return fn;
}

bool BatchHolds(const Element& batch, int64_t first, int64_t count) {
  if (batch[1].dim(0) != count) return false;
  for (int64_t r = 0; r < count; ++r) {
    if (batch[0].data<int64_t>()[r] != first + r) return false;
    for (float x : batch[1].SubTensor(r).span<float>()) {
      if (x != static_cast<float>(first + r)) return false;
    }
  }
  return true;
}

// Batches held by the consumer stay intact while the stage goes on (their blocks are not
// recycled under them), and batches dropped at once (recycled) are the same batches.
TEST(FusedMapAndBatchBuffersTest, HeldAndRecycledBatchesAreIntact) {
  for (bool into : {true, false}) {
    const MapIntoFn fn = FilledFn();
    const Dataset ds =
        into ? Dataset::Range(22).Map(fn, 3).Batch(4) : Dataset::Range(22).Map(fn.fn, 3).Batch(4);
    auto held = CollectAll(ds);
    ASSERT_TRUE(held.ok()) << held.status();
    ASSERT_EQ(held->size(), 6u);
    for (int64_t b = 0; b < 6; ++b) {
      EXPECT_TRUE(BatchHolds((*held)[b], 4 * b, b < 5 ? 4 : 2)) << "held batch " << b;
    }
    auto it = *ds.MakeIterator();
    for (int64_t b = 0; b < 6; ++b) {
      auto next = it->GetNext();
      ASSERT_TRUE(next.ok() && next->has_value());
      EXPECT_TRUE(BatchHolds(**next, 4 * b, b < 5 ? 4 : 2)) << "recycled batch " << b;
    }
  }
}

// An iterator made per epoch fills its batches in the blocks the previous one released (the
// pool is the map node's), rather than in new memory.
TEST(FusedMapAndBatchBuffersTest, TheNextIteratorReusesTheBlocks) {
  const Dataset mapped = Dataset::Range(22).Map(FilledFn(), 3);
  const Dataset batched = mapped.Batch(4);
  const ParallelMapSpec* spec = mapped.node()->AsParallelMap();
  ASSERT_NE(spec, nullptr);
  int64_t after_first = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto it = *batched.MakeIterator();
    for (int64_t b = 0; b < 6; ++b) {
      auto next = it->GetNext();
      ASSERT_TRUE(next.ok() && next->has_value());
      EXPECT_TRUE(BatchHolds(**next, 4 * b, b < 5 ? 4 : 2)) << epoch << " " << b;
    }
    it.reset();  // the iterator is gone; its blocks stay with the dataset (at most 2)
    if (epoch == 0) after_first = spec->batch_buffers->blocks_mapped();
    if (kRecycles) {
      EXPECT_GE(spec->batch_buffers->free_blocks(), 1) << epoch;
      EXPECT_LE(spec->batch_buffers->free_blocks(), 2) << epoch;
    }
  }
  EXPECT_GT(after_first, 0);  // the fused stage allocated from the map node's pool
}

// The consumer waits for a whole batch's results (AsyncStage::ExpectResults); a RAM budget
// that lets the map hold only a few of them must still make progress, in order and as
// finished.
TEST(FusedMapAndBatchBuffersTest, ARamBudgetBelowABatchStillProgresses) {
  for (bool deterministic : {true, false}) {
    Options options;
    options.ram_budget_bytes = 4 * kLarge.num_elements() * 4;  // about 4 elements
    const MapIntoFn fn = FilledFn();
    auto batches = CollectAll(
        Dataset::Range(40).Map(fn, kAutotune, deterministic).Batch(16).Prefetch(kAutotune),
        options);
    ASSERT_TRUE(batches.ok()) << batches.status();
    ASSERT_EQ(batches->size(), 3u);
    int64_t images = 0;
    for (const Element& b : *batches) images += b[0].dim(0);
    EXPECT_EQ(images, 40);
    if (deterministic) {
      EXPECT_TRUE(BatchHolds((*batches)[1], 16, 16));
    }
  }
}

}  // namespace
}  // namespace kiln::data
