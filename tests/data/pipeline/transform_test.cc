// Semantics of sources and transformations, checked against tf.data's documented behaviour.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using ::kiln::data::testing::AddFn;
using ::kiln::data::testing::AsInt64;
using ::kiln::data::testing::CollectAll;
using ::kiln::data::testing::CollectInt64;
using ::kiln::data::testing::Int64Element;
using ::kiln::data::testing::Iota;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(RangeTest, CountsLikePythonRange) {
  EXPECT_THAT(*CollectInt64(Dataset::Range(5)), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(*CollectInt64(Dataset::Range(2, 5)), ElementsAre(2, 3, 4));
  EXPECT_THAT(*CollectInt64(Dataset::Range(1, 5, 2)), ElementsAre(1, 3));
  EXPECT_THAT(*CollectInt64(Dataset::Range(5, 1, -2)), ElementsAre(5, 3));
  EXPECT_TRUE(CollectInt64(Dataset::Range(0))->empty());
  EXPECT_EQ(Dataset::Range(1, 5, 2).Cardinality(), 2);
  EXPECT_FALSE(Dataset::Range(0, 5, 0).ok());
}

TEST(FromTensorSlicesTest, SlicesFirstDimensionAndKeepsNames) {
  auto names = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"x", "y"});
  Element e({Tensor::FromVector<int64_t>({1, 2, 3, 4, 5, 6}, Shape{3, 2}),
             Tensor::FromVector<std::string>({"a", "b", "c"})},
            names);
  auto all = *CollectAll(Dataset::FromTensorSlices(e));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1][0].shape(), Shape({2}));
  EXPECT_EQ(all[1][0].data<int64_t>()[1], 4);
  EXPECT_EQ(*all[2][1].data<std::string>(), "c");
  EXPECT_EQ(all[0].IndexOf("y"), 1);
}

TEST(FromTensorSlicesTest, MismatchedFirstDimensionIsAnError) {
  Element e({Tensor::FromVector<int64_t>({1, 2, 3}), Tensor::FromVector<int64_t>({1, 2})});
  Dataset ds = Dataset::FromTensorSlices(e);
  EXPECT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("[2]"));
  EXPECT_FALSE(ds.Map(AddFn(1)).MakeIterator().ok());  // the error travels down the chain
}

TEST(FromTensorsTest, OneElement) {
  auto all = *CollectInt64(Dataset::FromTensors(Int64Element(7)).Repeat(3));
  EXPECT_THAT(all, ElementsAre(7, 7, 7));
}

TEST(GeneratorTest, EachIteratorRestartsTheGenerator) {
  std::atomic<int> starts{0};
  Dataset ds = Dataset::FromGenerator([&starts] {
    starts++;
    return [i = 0]() mutable -> absl::StatusOr<std::optional<Element>> {
      if (i == 3) return std::optional<Element>();
      return std::optional<Element>(Int64Element(i++));
    };
  });
  EXPECT_THAT(*CollectInt64(ds.Repeat(2)), ElementsAre(0, 1, 2, 0, 1, 2));
  EXPECT_EQ(starts.load(), 2);
}

TEST(LifetimeTest, IteratorsOutliveTheirDatasets) {
  // The Dataset temporaries (and the function's captured state) are gone before GetNext.
  auto offset = std::make_shared<int64_t>(100);
  MapFn add_offset = [offset](Element e) -> absl::StatusOr<Element> {
    return Element({Tensor::Scalar<int64_t>(AsInt64(e) + *offset)});
  };
  auto it = *Dataset::Range(3).Map(std::move(add_offset), 2).Prefetch(1).MakeIterator();
  offset.reset();
  std::vector<int64_t> out;
  while (auto next = *it->GetNext()) out.push_back(AsInt64(*next));
  EXPECT_THAT(out, ElementsAre(100, 101, 102));
  // Interleave's function returns datasets that only the iterators keep alive.
  DatasetFn fn = [](Element e) -> absl::StatusOr<Dataset> {
    auto values = Tensor::FromVector<int64_t>({AsInt64(e), AsInt64(e)});
    return Dataset::FromTensorSlices(Element({values}));
  };
  EXPECT_THAT(*CollectInt64(Dataset::Range(3).FlatMap(fn)), ElementsAre(0, 0, 1, 1, 2, 2));
}

TEST(MapTest, SequentialAndParallelKeepOrder) {
  std::vector<int64_t> expected = Iota(1, 201);
  EXPECT_THAT(*CollectInt64(Dataset::Range(200).Map(AddFn(1))), ElementsAreArray(expected));
  // Later elements finish first; deterministic output is still in input order.
  MapFn slow_first = [](Element e) -> absl::StatusOr<Element> {
    if (AsInt64(e) % 7 == 0) SleepForNanos(2'000'000);
    return AddFn(1)(std::move(e));
  };
  EXPECT_THAT(*CollectInt64(Dataset::Range(200).Map(slow_first, 4)), ElementsAreArray(expected));
  EXPECT_THAT(*CollectInt64(Dataset::Range(200).Map(slow_first, kAutotune)),
              ElementsAreArray(expected));
}

TEST(MapTest, NondeterministicYieldsEveryElementAndLetsFastOnesOvertake) {
  MapFn slow_zero = [](Element e) -> absl::StatusOr<Element> {
    if (AsInt64(e) == 0) SleepForNanos(50'000'000);
    return e;
  };
  auto out = *CollectInt64(Dataset::Range(50).Map(slow_zero, 4, /*deterministic=*/false));
  std::vector<int64_t> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_THAT(sorted, ElementsAreArray(Iota(0, 50)));
  EXPECT_NE(out[0], 0);
}

TEST(MapTest, ErrorsNameTheElementAndIterationContinues) {
  MapFn fail_on_two = [](Element e) -> absl::StatusOr<Element> {
    if (AsInt64(e) == 2) return absl::InvalidArgumentError("bad element 2");
    return e;
  };
  for (int parallel : {kSequential, 3}) {
    auto it = *Dataset::Range(4).Map(fail_on_two, parallel).MakeIterator();
    std::vector<std::string> seen;
    while (true) {
      auto next = it->GetNext();
      if (!next.ok()) {
        seen.push_back(std::string(next.status().message()));
        continue;
      }
      if (!next->has_value()) break;
      seen.push_back(std::to_string(AsInt64(**next)));
    }
    EXPECT_THAT(seen, ElementsAre("0", "1", "bad element 2", "3")) << parallel;
  }
}

TEST(IgnoreErrorsTest, SkipsAndCounts) {
  MapFn fail_odd = [](Element e) -> absl::StatusOr<Element> {
    if (AsInt64(e) % 2 == 1) return absl::DataLossError("odd");
    return e;
  };
  auto it = *Dataset::Range(10).Map(fail_odd, 2).IgnoreErrors().MakeIterator();
  std::vector<int64_t> out;
  while (true) {
    auto next = *it->GetNext();
    if (!next) break;
    out.push_back(AsInt64(*next));
  }
  EXPECT_THAT(out, ElementsAre(0, 2, 4, 6, 8));
  PipelineStats stats = it->Stats();
  int64_t ignored = 0;
  for (const auto& s : stats.stages) ignored += s.errors_ignored;
  EXPECT_EQ(ignored, 5);
}

TEST(FilterTakeSkipTest, Basics) {
  auto even = [](const Element& e) -> absl::StatusOr<bool> { return AsInt64(e) % 2 == 0; };
  EXPECT_THAT(*CollectInt64(Dataset::Range(10).Filter(even)), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_THAT(*CollectInt64(Dataset::Range(10).Take(3)), ElementsAre(0, 1, 2));
  EXPECT_THAT(*CollectInt64(Dataset::Range(4).Take(-1)), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(*CollectInt64(Dataset::Range(10).Skip(7)), ElementsAre(7, 8, 9));
  EXPECT_TRUE(CollectInt64(Dataset::Range(10).Skip(-1))->empty());
  EXPECT_EQ(Dataset::Range(10).Skip(7).Cardinality(), 3);
  EXPECT_EQ(Dataset::Range(10).Repeat().Take(4).Cardinality(), 4);
}

TEST(ShardTest, EveryNthElementFromIndex) {
  EXPECT_THAT(*CollectInt64(Dataset::Range(10).Shard(3, 1)), ElementsAre(1, 4, 7));
  EXPECT_EQ(Dataset::Range(10).Shard(3, 0).Cardinality(), 4);
  EXPECT_FALSE(Dataset::Range(10).Shard(3, 3).ok());
  EXPECT_FALSE(Dataset::Range(10).Shard(0, 0).ok());
}

TEST(RepeatTest, CountsAndEmptyInput) {
  EXPECT_THAT(*CollectInt64(Dataset::Range(2).Repeat(3)), ElementsAre(0, 1, 0, 1, 0, 1));
  EXPECT_TRUE(CollectInt64(Dataset::Range(2).Repeat(0))->empty());
  // Repeating an empty dataset forever ends instead of spinning.
  EXPECT_TRUE(CollectInt64(Dataset::Range(0).Repeat())->empty());
  EXPECT_EQ(Dataset::Range(2).Repeat().Cardinality(), kInfiniteCardinality);
}

TEST(EnumerateZipConcatenateTest, Basics) {
  auto all = *CollectAll(Dataset::Range(5, 8).Enumerate(10));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(AsInt64(all[2], 0), 12);
  EXPECT_EQ(AsInt64(all[2], 1), 7);
  auto zipped = *CollectAll(Dataset::Range(3).Zip(Dataset::Range(10, 20)));
  ASSERT_EQ(zipped.size(), 3u);  // the shorter input ends the zip
  EXPECT_EQ(AsInt64(zipped[1], 1), 11);
  EXPECT_THAT(*CollectInt64(Dataset::Range(2).Concatenate(Dataset::Range(5, 7))),
              ElementsAre(0, 1, 5, 6));
  auto bad = Dataset::Range(2).Concatenate(Dataset::Range(2).Zip(Dataset::Range(2)));
  EXPECT_THAT(std::string(CollectInt64(bad).status().message()), HasSubstr("Concatenate"));
}

TEST(BatchTest, DropRemainderAndShapes) {
  auto batches = *CollectAll(Dataset::Range(7).Batch(3));
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0][0].shape(), Shape({3}));
  EXPECT_EQ(batches[2][0].shape(), Shape({1}));
  EXPECT_EQ(batches[2][0].data<int64_t>()[0], 6);
  EXPECT_EQ(CollectAll(Dataset::Range(7).Batch(3, true))->size(), 2u);
  EXPECT_EQ(Dataset::Range(7).Batch(3, true).Cardinality(), 2);
  // Parallel batching gives the same batches.
  auto parallel = *CollectAll(Dataset::Range(7).Batch(3, false, 2));
  ASSERT_EQ(parallel.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(TensorsEqual(parallel[i][0], batches[i][0]));
}

TEST(MapAndBatchTest, FusedParallelMapThenBatchEqualsTheUnfusedPipeline) {
  // Later elements finish first: slots must still be filled by input position.
  MapFn slow_first = [](Element e) -> absl::StatusOr<Element> {
    const int64_t v = AsInt64(e);
    if (v % 7 == 0) SleepForNanos(1'000'000);
    Tensor vec(DType::kFloat32, Shape{3});
    for (int i = 0; i < 3; ++i) vec.data<float>()[i] = static_cast<float>(v * 10 + i);
    Tensor name(DType::kString, Shape{});
    *name.data<std::string>() = absl::StrCat("element-", v);
    static const auto names = std::make_shared<const std::vector<std::string>>(
        std::vector<std::string>{"id", "vec", "name"});
    return Element({Tensor::Scalar<int64_t>(v), vec, name}, names);
  };
  Dataset fused = Dataset::Range(50).Map(slow_first, 4).Batch(8);
  {
    auto it = *fused.MakeIterator();
    while (it->GetNext()->has_value()) {
    }
    EXPECT_THAT(it->Stats().ToString(), HasSubstr("MapAndBatch/ParallelMap"));
  }
  EXPECT_EQ(fused.Cardinality(), 7);
  auto unfused = *CollectAll(Dataset::Range(50).Map(slow_first).Batch(8));
  auto batches = *CollectAll(fused);
  ASSERT_EQ(batches.size(), 7u);
  for (size_t b = 0; b < batches.size(); ++b) {
    ASSERT_EQ(batches[b].size(), 3u);
    ASSERT_TRUE(batches[b].names != nullptr);
    EXPECT_EQ(*batches[b].names, *unfused[b].names);
    for (int c = 0; c < 3; ++c) {
      EXPECT_TRUE(TensorsEqual(batches[b][c], unfused[b][c])) << "batch " << b << " comp " << c;
    }
  }
  EXPECT_EQ(batches[6][1].shape(), Shape({2, 3}));  // the partial last batch
  EXPECT_EQ(*batches[6][2].data<std::string>(), "element-48");
  EXPECT_EQ(CollectAll(Dataset::Range(50).Map(slow_first, kAutotune).Batch(8, true))->size(), 6u);
  // Nondeterministic: batches in completion order, every element once and intact.
  auto any_order = *CollectAll(Dataset::Range(50).Map(slow_first, 4, false).Batch(8));
  ASSERT_EQ(any_order.size(), 7u);
  std::vector<int64_t> ids;
  for (const Element& b : any_order) {
    EXPECT_EQ(b[0].dim(0), &b == &any_order.back() ? 2 : 8);
    for (int64_t r = 0; r < b[0].dim(0); ++r) {
      const int64_t id = b[0].data<int64_t>()[r];
      ids.push_back(id);
      EXPECT_EQ(b[1].data<float>()[r * 3 + 2], static_cast<float>(id * 10 + 2));
      EXPECT_EQ(b[2].data<std::string>()[r], absl::StrCat("element-", id));
    }
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_THAT(ids, ElementsAreArray(Iota(0, 50)));
}

// The fusion is a rewrite made when the iterator is built: the Dataset still describes a Map
// and a Batch (Options::map_and_batch_fusion = false runs them apart, with the same
// elements), and the fused stage keeps the Batch's options.
int StageParallelism(const Iterator& it, const std::string& name) {
  for (const StageStats& s : it.Stats().stages) {
    if (s.name == name) return s.parallelism;
  }
  return -1;
}

TEST(MapAndBatchTest, FusionIsARewriteAtMakeIteratorThatKeepsTheBatchOptions) {
  Dataset ds = Dataset::Range(40).Map(AddFn(1), 2).Batch(8);
  Options unfused_options;
  unfused_options.map_and_batch_fusion = false;
  {
    auto fused = *ds.MakeIterator();
    auto unfused = *ds.MakeIterator(unfused_options);
    for (int b = 0; b < 5; ++b) {
      auto x = *fused->GetNext();
      auto y = *unfused->GetNext();
      ASSERT_TRUE(x.has_value() && y.has_value());
      EXPECT_TRUE(TensorsEqual((*x)[0], (*y)[0])) << "batch " << b;
    }
    EXPECT_THAT(fused->Stats().ToString(), HasSubstr("MapAndBatch/ParallelMap"));
    EXPECT_THAT(unfused->Stats().ToString(), Not(HasSubstr("MapAndBatch")));
    EXPECT_THAT(unfused->Stats().ToString(), HasSubstr("Batch/ParallelMap"));
  }
  // num_parallel_calls: the fused stage does both stages' work, so it takes the larger
  // request, and kAutotune (resolved to the CPU budget here, autotuning off) over a count.
  Options fixed;
  fixed.autotune = false;
  fixed.cpu_budget = 6;
  auto wide_batch = *Dataset::Range(40).Map(AddFn(1), 1).Batch(8, false, 3).MakeIterator(fixed);
  EXPECT_EQ(StageParallelism(*wide_batch, "MapAndBatch/ParallelMap"), 3);
  auto auto_batch =
      *Dataset::Range(40).Map(AddFn(1), 2).Batch(8, false, kAutotune).MakeIterator(fixed);
  EXPECT_EQ(StageParallelism(*auto_batch, "MapAndBatch/ParallelMap"), 6);
  auto wide_map = *Dataset::Range(40).Map(AddFn(1), 5).Batch(8, false, 2).MakeIterator(fixed);
  EXPECT_EQ(StageParallelism(*wide_map, "MapAndBatch/ParallelMap"), 5);
  // deterministic: a parallel Batch that allows any order makes the fused stage
  // nondeterministic (so its order cannot be checkpointed); a sequential Batch has no order to
  // relax, and deterministic = true on both keeps the order.
  auto any_order = *Dataset::Range(40).Map(AddFn(1), 2).Batch(8, false, 2, false).MakeIterator();
  EXPECT_EQ(any_order->SaveState().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(any_order->SaveState().status().message(), HasSubstr("deterministic = false"));
  auto sequential = *Dataset::Range(40).Map(AddFn(1), 2).Batch(8, false, 0, false).MakeIterator();
  EXPECT_TRUE(sequential->SaveState().ok());
  auto ordered = *Dataset::Range(40).Map(AddFn(1), 2).Batch(8, false, 2, true).MakeIterator();
  EXPECT_TRUE(ordered->SaveState().ok());
  EXPECT_THAT(
      *CollectInt64(Dataset::Range(40).Map(AddFn(1), 2).Batch(8, false, 2, false).Unbatch()),
      ::testing::UnorderedElementsAreArray(Iota(1, 41)));
}

TEST(MapAndBatchTest, AFailedElementFailsItsBatchAndTheNextBatchFollows) {
  MapFn fail_on_five = [](Element e) -> absl::StatusOr<Element> {
    if (AsInt64(e) == 5) return absl::InvalidArgumentError("bad element 5");
    return e;
  };
  auto it = *Dataset::Range(12).Map(fail_on_five, 3).Batch(4).MakeIterator();
  std::vector<std::string> seen;
  while (true) {
    auto next = it->GetNext();
    if (!next.ok()) {
      seen.push_back(std::string(next.status().message()));
      continue;
    }
    if (!next->has_value()) break;
    seen.push_back(absl::StrCat("batch from ", (**next)[0].data<int64_t>()[0]));
  }
  EXPECT_THAT(seen, ElementsAre("batch from 0", "bad element 5", "batch from 8"));
}

TEST(BatchTest, RaggedElementsNameTheShapes) {
  MapFn ragged = [](Element e) -> absl::StatusOr<Element> {
    const int64_t n = AsInt64(e);
    return Element({Tensor::Zeros(DType::kFloat32, Shape{n + 1})});
  };
  for (int parallel : {kSequential, 2}) {
    auto status = CollectAll(Dataset::Range(4).Map(ragged).Batch(4, false, parallel)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("First element had shape [1] and element 1 had shape [2]"));
  }
  // Fused with a parallel map (in order or not): the error names the batch's element shape
  // and the odd one, and iteration ends instead of waiting for a slot never written.
  for (bool deterministic : {true, false}) {
    auto status = CollectAll(Dataset::Range(4).Map(ragged, 2, deterministic).Batch(4)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("Cannot batch tensors with different shapes"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("had shape ["));
  }
}

TEST(PaddedBatchTest, PadsToLargestLikeTfDocs) {
  // tf.data docs: range(1, 5).map(lambda x: tf.fill([x], x)).padded_batch(2)
  MapFn fill = [](Element e) -> absl::StatusOr<Element> {
    const int64_t n = AsInt64(e);
    return Element({Tensor::FromVector(std::vector<int64_t>(n, n))});
  };
  auto batches = *CollectAll(Dataset::Range(1, 5).Map(fill).PaddedBatch(2));
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_TRUE(TensorsEqual(batches[0][0], Tensor::FromVector<int64_t>({1, 0, 2, 2}, Shape{2, 2})));
  EXPECT_TRUE(TensorsEqual(batches[1][0],
                           Tensor::FromVector<int64_t>({3, 3, 3, 0, 4, 4, 4, 4}, Shape{2, 4})));
  // A fixed padded shape and a padding value.
  auto fixed = *CollectAll(
      Dataset::Range(1, 3).Map(fill).PaddedBatch(2, {Shape{3}}, {Tensor::Scalar<int64_t>(-1)}));
  EXPECT_TRUE(
      TensorsEqual(fixed[0][0], Tensor::FromVector<int64_t>({1, -1, -1, 2, 2, -1}, Shape{2, 3})));
  auto too_small = CollectAll(Dataset::Range(1, 5).Map(fill).PaddedBatch(2, {Shape{2}}));
  EXPECT_THAT(std::string(too_small.status().message()), HasSubstr("smaller size"));
}

TEST(PaddedBatchTest, PadsRank2) {
  MapFn square = [](Element e) -> absl::StatusOr<Element> {
    const int64_t n = AsInt64(e);
    std::vector<int32_t> v(n * n, static_cast<int32_t>(n));
    return Element({Tensor::FromVector(v, Shape{n, n})});
  };
  auto b = *CollectAll(Dataset::Range(1, 3).Map(square).PaddedBatch(2));
  EXPECT_TRUE(
      TensorsEqual(b[0][0], Tensor::FromVector<int32_t>({1, 0, 0, 0, 2, 2, 2, 2}, Shape{2, 2, 2})));
}

TEST(UnbatchTest, SplitsFirstDimension) {
  EXPECT_THAT(*CollectInt64(Dataset::Range(7).Batch(3).Unbatch()), ElementsAreArray(Iota(0, 7)));
  auto bad = CollectAll(Dataset::Range(3).Unbatch());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("scalar"));
}

TEST(ShuffleTest, SeedsAndReshuffling) {
  auto a = *CollectInt64(Dataset::Range(100).Shuffle(50, 7));
  auto b = *CollectInt64(Dataset::Range(100).Shuffle(50, 7));
  EXPECT_EQ(a, b);  // same seed, same order
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_THAT(sorted, ElementsAreArray(Iota(0, 100)));  // a permutation
  EXPECT_NE(a, Iota(0, 100));
  // reshuffle_each_iteration: each epoch differs, but the sequence of epochs is reproducible.
  auto epochs = *CollectInt64(Dataset::Range(20).Shuffle(20, 3).Repeat(2));
  std::vector<int64_t> e1(epochs.begin(), epochs.begin() + 20),
      e2(epochs.begin() + 20, epochs.end());
  EXPECT_NE(e1, e2);
  EXPECT_EQ(epochs, *CollectInt64(Dataset::Range(20).Shuffle(20, 3).Repeat(2)));
  auto same = *CollectInt64(Dataset::Range(20).Shuffle(20, 3, false).Repeat(2));
  EXPECT_EQ(std::vector<int64_t>(same.begin(), same.begin() + 20),
            std::vector<int64_t>(same.begin() + 20, same.end()));
  // A buffer of one does not reorder; an element never moves earlier than buffer_size allows.
  EXPECT_EQ(*CollectInt64(Dataset::Range(10).Shuffle(1, 5)), Iota(0, 10));
  auto local = *CollectInt64(Dataset::Range(100).Shuffle(4, 9));
  for (size_t i = 0; i < local.size(); ++i) EXPECT_LE(local[i], static_cast<int64_t>(i) + 3);
}

TEST(ShuffleTest, MixedShapesAndStringsArePermutedIntact) {
  // Starts packed (fixed shape), then an element of another shape arrives: the buffer
  // switches to separate elements without losing or corrupting any.
  MapFn varying = [](Element e) -> absl::StatusOr<Element> {
    const int64_t x = AsInt64(e);
    const int64_t n = x < 50 ? 2 : 3;
    return Element({Tensor::FromVector(std::vector<int64_t>(n, x)),
                    Tensor::Scalar<std::string>(std::to_string(x))});
  };
  MapFn fixed = [](Element e) -> absl::StatusOr<Element> {
    const int64_t x = AsInt64(e);
    return Element({Tensor::FromVector(std::vector<int64_t>(x < 50 ? 2 : 3, x))});
  };
  for (const MapFn& fn : {varying, fixed}) {
    auto all = *CollectAll(Dataset::Range(100).Map(fn).Shuffle(30, 4));
    ASSERT_EQ(all.size(), 100u);
    std::vector<int64_t> firsts;
    for (const Element& e : all) {
      const int64_t x = e[0].data<int64_t>()[0];
      EXPECT_EQ(e[0].num_elements(), x < 50 ? 2 : 3);
      EXPECT_EQ(e[0].data<int64_t>()[e[0].num_elements() - 1], x);
      if (e.size() == 2) {
        EXPECT_EQ(*e[1].data<std::string>(), std::to_string(x));
      }
      firsts.push_back(x);
    }
    std::sort(firsts.begin(), firsts.end());
    EXPECT_EQ(firsts, Iota(0, 100));
  }
}

Dataset Repeated(int64_t x, int64_t times) {
  return Dataset::FromTensors(Int64Element(x)).Repeat(times);
}

TEST(InterleaveTest, OrderWithBlockLengthMatchesTfDocs) {
  // tf.data docs: range(1, 6).interleave(lambda x: from_tensors(x).repeat(6),
  //                                      cycle_length=2, block_length=4)
  const std::vector<int64_t> expected = {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                         3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};
  DatasetFn fn = [](Element e) -> absl::StatusOr<Dataset> { return Repeated(AsInt64(e), 6); };
  EXPECT_THAT(*CollectInt64(Dataset::Range(1, 6).Interleave(fn, 2, 4)), ElementsAreArray(expected));
  for (int parallel : {1, 2, kAutotune}) {
    EXPECT_THAT(*CollectInt64(Dataset::Range(1, 6).Interleave(fn, 2, 4, parallel)),
                ElementsAreArray(expected))
        << parallel;
  }
}

TEST(InterleaveTest, UnevenInputsAndEmptyOnes) {
  // Input x expands to x copies of x: 0 is empty, so slots are refilled in sequence.
  DatasetFn fn = [](Element e) -> absl::StatusOr<Dataset> {
    return Repeated(AsInt64(e), AsInt64(e));
  };
  auto sequential = *CollectInt64(Dataset::Range(6).Interleave(fn, 3, 2));
  EXPECT_EQ(sequential.size(), 15u);
  auto parallel = *CollectInt64(Dataset::Range(6).Interleave(fn, 3, 2, 3));
  EXPECT_EQ(parallel, sequential);
  auto nondeterministic = *CollectInt64(Dataset::Range(6).Interleave(fn, 3, 2, 3, false));
  std::sort(nondeterministic.begin(), nondeterministic.end());
  std::vector<int64_t> sorted = sequential;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(nondeterministic, sorted);
}

TEST(FlatMapTest, ConcatenatesInOrder) {
  DatasetFn fn = [](Element e) -> absl::StatusOr<Dataset> { return Dataset::Range(AsInt64(e)); };
  EXPECT_THAT(*CollectInt64(Dataset::Range(4).FlatMap(fn)), ElementsAre(0, 0, 1, 0, 1, 2));
}

TEST(PrefetchTest, SameElements) {
  EXPECT_THAT(*CollectInt64(Dataset::Range(100).Prefetch(3)), ElementsAreArray(Iota(0, 100)));
  EXPECT_THAT(*CollectInt64(Dataset::Range(100).Map(AddFn(0), 2).Prefetch(kAutotune)),
              ElementsAreArray(Iota(0, 100)));
}

TEST(CacheTest, MemoryCacheServesLaterEpochsWithoutTheInput) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  MapFn counted = [calls](Element e) -> absl::StatusOr<Element> {
    calls->fetch_add(1);
    return e;
  };
  Dataset ds = Dataset::Range(5).Map(counted).Cache();
  EXPECT_THAT(*CollectInt64(ds), ElementsAreArray(Iota(0, 5)));
  EXPECT_THAT(*CollectInt64(ds), ElementsAreArray(Iota(0, 5)));
  EXPECT_EQ(calls->load(), 5);
  EXPECT_THAT(*CollectInt64(ds.Repeat(3)),
              ElementsAreArray(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  EXPECT_EQ(calls->load(), 5);
}

TEST(CacheTest, PartialIterationLeavesNoCache) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  MapFn counted = [calls](Element e) -> absl::StatusOr<Element> {
    calls->fetch_add(1);
    return e;
  };
  Dataset ds = Dataset::Range(5).Map(counted).Cache();
  EXPECT_THAT(*CollectInt64(ds.Take(2)), ElementsAre(0, 1));
  EXPECT_THAT(*CollectInt64(ds), ElementsAreArray(Iota(0, 5)));
  EXPECT_EQ(calls->load(), 7);
}

TEST(CacheTest, FileCacheIsReusedByALaterDatasetAndRun) {
  const std::string path = testing::TempPath("cache");
  std::remove(path.c_str());
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto make = [&] {
    MapFn counted = [calls](Element e) -> absl::StatusOr<Element> {
      calls->fetch_add(1);
      return Element({e[0], Tensor::Scalar<std::string>("s" + std::to_string(AsInt64(e)))});
    };
    return Dataset::Range(4).Map(counted).Cache(path);
  };
  // An iteration that stops early writes nothing.
  EXPECT_EQ(CollectAll(make().Take(2))->size(), 2u);
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  auto first = *CollectAll(make());
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
  const int calls_after_write = calls->load();
  auto second = *CollectAll(make());  // a new Dataset object, as a new program run would make
  EXPECT_EQ(calls->load(), calls_after_write);
  ASSERT_EQ(second.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(TensorsEqual(first[i][0], second[i][0]));
    EXPECT_TRUE(TensorsEqual(first[i][1], second[i][1]));
  }
  // A truncated cache file is reported with its name and offset.
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(ftruncate(fileno(f), 30), 0);
  std::fclose(f);
  auto truncated = CollectAll(make());
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr(path));
  std::remove(path.c_str());
}

TEST(ListFilesTest, GlobShuffleAndErrors) {
  std::vector<std::string> paths;
  for (int i = 0; i < 6; ++i) {
    paths.push_back(testing::TempPath("list_" + std::to_string(i) + ".txt"));
    std::FILE* f = std::fopen(paths.back().c_str(), "w");
    std::fclose(f);
  }
  const std::string pattern = testing::TempPath("list_*.txt");
  auto names = [](const Dataset& ds) {
    std::vector<std::string> out;
    auto all = CollectAll(ds);
    EXPECT_TRUE(all.ok()) << all.status();
    if (all.ok()) {
      for (const Element& e : *all) out.push_back(*e[0].data<std::string>());
    }
    return out;
  };
  EXPECT_EQ(names(Dataset::ListFiles({pattern}, false)), paths);
  auto a = names(Dataset::ListFiles({pattern}, true, 11));
  EXPECT_EQ(a, names(Dataset::ListFiles({pattern}, true, 11)));
  std::vector<std::string> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, paths);
  Dataset missing = Dataset::ListFiles({testing::TempPath("nothing_*.none")});
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nothing_*.none"));
  for (const auto& p : paths) std::remove(p.c_str());
}

}  // namespace
}  // namespace kiln::data
