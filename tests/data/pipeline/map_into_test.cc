// A MapIntoFn (map_into.h) before a Batch: results written straight into their batch slots
// equal the plain function's batches, in order and as finished, also when calls fail after
// taking their slot.
#include "kiln/data/map_into.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using ::kiln::data::testing::AsInt64;
using ::kiln::data::testing::CollectAll;
using ::kiln::data::testing::Iota;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Element v -> (v, [v * 10, v * 10 + 1, v * 10 + 2] as float). Elements whose v is in
// `failing` fail after taking their slot; multiples of 7 are slow, so later ones finish first.
// `into` records the slots it wrote into.
struct Recorder {
  std::mutex mu;
  std::set<const void*> slots;
};

MapIntoFn VectorFn(std::set<int64_t> failing, std::shared_ptr<Recorder> recorder) {
  auto compute = [failing](Element e, const SlotAllocator* allocate) -> absl::StatusOr<Element> {
    const int64_t v = AsInt64(e);
    if (v % 7 == 0) SleepForNanos(500'000);
    Tensor vec;
    if (allocate != nullptr) {
      absl::StatusOr<Tensor> slot = (*allocate)(1, DType::kFloat32, Shape{3});
      if (!slot.ok()) return slot.status();
      vec = *slot;
    } else {
      vec = Tensor(DType::kFloat32, Shape{3});
    }
    if (failing.count(v) > 0) return absl::DataLossError(absl::StrCat("element ", v, " fails"));
    for (int i = 0; i < 3; ++i) vec.data<float>()[i] = static_cast<float>(v * 10 + i);
    return Element({Tensor::Scalar<int64_t>(v), vec});
  };
  MapIntoFn fn;
  fn.fn = [compute](Element e) { return compute(std::move(e), nullptr); };
  fn.into = [compute, recorder](Element e, SlotAllocator allocate) -> absl::StatusOr<Element> {
    absl::StatusOr<Element> out = compute(std::move(e), &allocate);
    if (out.ok()) {
      std::lock_guard<std::mutex> lock(recorder->mu);
      recorder->slots.insert((*out)[1].raw_data());
    }
    return out;
  };
  return fn;
}

TEST(MapIntoTest, InOrderWritesIntoTheSlotsAndEqualsThePlainFunction) {
  auto recorder = std::make_shared<Recorder>();
  const MapIntoFn fn = VectorFn({}, recorder);
  auto batches = *CollectAll(Dataset::Range(50).Map(fn, 4).Batch(8));
  auto plain = *CollectAll(Dataset::Range(50).Map(fn.fn).Batch(8));
  ASSERT_EQ(batches.size(), 7u);
  ASSERT_EQ(plain.size(), 7u);
  std::set<const void*> batch_slots;
  for (size_t b = 0; b < batches.size(); ++b) {
    for (int c = 0; c < 2; ++c) EXPECT_TRUE(TensorsEqual(batches[b][c], plain[b][c])) << b;
    for (int64_t r = 0; r < batches[b][1].dim(0); ++r) {
      batch_slots.insert(batches[b][1].SubTensor(r).raw_data());
    }
  }
  // Every image was computed in its batch slot: nothing was copied there.
  std::lock_guard<std::mutex> lock(recorder->mu);
  EXPECT_EQ(recorder->slots, batch_slots);
}

TEST(MapIntoTest, AFailedCallInOrderFailsItsBatchOnly) {
  auto batches_or = CollectAll(Dataset::Range(50)
                                   .Map(VectorFn({9}, std::make_shared<Recorder>()), 3)
                                   .Batch(8)
                                   .IgnoreErrors());
  ASSERT_TRUE(batches_or.ok()) << batches_or.status();
  // Batch 1 (elements 8-15) failed; the others are intact.
  ASSERT_EQ(batches_or->size(), 6u);
  EXPECT_EQ((*batches_or)[1][0].data<int64_t>()[0], 16);
  EXPECT_EQ((*batches_or)[1][1].data<float>()[3 * 7 + 2], 23 * 10 + 2);
}

// As finished, a call that fails after taking its slot leaves a hole; later calls fill it
// first, and holes left at the end are filled from the last slots, so every batch but the
// last is full and holds each surviving element once, intact.
TEST(MapIntoTest, AsFinishedFailuresAfterTakingASlotLeaveNoHoles) {
  for (std::set<int64_t> failing : std::vector<std::set<int64_t>>{
           {3, 10, 11, 12}, {45, 46, 49}, {0, 1, 2, 3, 4, 5, 6, 7, 8}, {48, 49}}) {
    auto it = *Dataset::Range(50)
                   .Map(VectorFn(failing, std::make_shared<Recorder>()), 4, false)
                   .Batch(8)
                   .MakeIterator();
    std::vector<Element> batches;
    int errors = 0;
    while (true) {
      auto next = it->GetNext();
      if (!next.ok()) {
        EXPECT_THAT(next.status().message(), HasSubstr("fails"));
        ++errors;
        continue;
      }
      if (!next->has_value()) break;
      batches.push_back(std::move(**next));
    }
    EXPECT_EQ(errors, static_cast<int>(failing.size()));
    const int64_t survivors = 50 - static_cast<int64_t>(failing.size());
    ASSERT_EQ(static_cast<int64_t>(batches.size()), (survivors + 7) / 8);
    std::vector<int64_t> ids;
    for (size_t k = 0; k < batches.size(); ++k) {
      const Element& b = batches[k];
      EXPECT_EQ(b[0].dim(0), std::min<int64_t>(8, survivors - 8 * static_cast<int64_t>(k)));
      for (int64_t r = 0; r < b[0].dim(0); ++r) {
        const int64_t id = b[0].data<int64_t>()[r];
        ids.push_back(id);
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(b[1].data<float>()[r * 3 + i], static_cast<float>(id * 10 + i)) << id;
        }
      }
    }
    std::vector<int64_t> expected;
    for (int64_t v : Iota(0, 50)) {
      if (failing.count(v) == 0) expected.push_back(v);
    }
    std::sort(ids.begin(), ids.end());
    EXPECT_THAT(ids, ElementsAreArray(expected));
  }
}

// A slot of another shape than the batch's is the error Batch gives, before any write.
TEST(MapIntoTest, ASlotOfAnotherShapeIsTheBatchError) {
  MapIntoFn fn;
  auto make = [](int64_t v, Tensor vec) { return Element({Tensor::Scalar<int64_t>(v), vec}); };
  fn.fn = [&](Element e) -> absl::StatusOr<Element> {
    const int64_t v = AsInt64(e);
    return make(v, Tensor(DType::kFloat32, Shape{v == 2 ? 4 : 3}));
  };
  fn.into = [&](Element e, SlotAllocator allocate) -> absl::StatusOr<Element> {
    const int64_t v = AsInt64(e);
    absl::StatusOr<Tensor> slot = allocate(1, DType::kFloat32, Shape{v == 2 ? 4 : 3});
    if (!slot.ok()) return slot.status();
    return make(v, *slot);
  };
  auto result = CollectAll(Dataset::Range(4).Map(fn, 1).Batch(4));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("Cannot batch tensors with different shapes"));
}

}  // namespace
}  // namespace kiln::data
