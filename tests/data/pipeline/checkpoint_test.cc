// Iterator checkpoints: for every deterministic pipeline, an iterator restored from a state
// continues with exactly the elements (and element errors) the saved iterator produces next;
// the state stays small; a state from another pipeline, a corrupt state and a nondeterministic
// pipeline are errors that say so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "checkpoint_pipelines.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using ::kiln::data::testing::CheckpointPipelines;
using ::kiln::data::testing::DescribeNext;
using ::testing::HasSubstr;

// The next `limit` positions of `it` (elements or element errors), described.
std::vector<std::string> Continue(Iterator* it, int limit) {
  std::vector<std::string> out;
  for (int i = 0; i < limit; ++i) {
    bool end = false;
    std::string d = DescribeNext(it, &end);
    if (end) break;
    out.push_back(std::move(d));
  }
  return out;
}

constexpr int kLimit = 3000;  // for infinite pipelines

struct Case {
  std::string name;
  std::function<Dataset()> make;
};

class ExactResumeTest : public ::testing::TestWithParam<std::string> {};

// For each pipeline and several save points (the start, early, mid, near or past the end):
// run, save, keep running (the uninterrupted continuation), then restore a new iterator of
// another Dataset object built the same way (as another process would) and of the same object.
TEST_P(ExactResumeTest, ContinuesWithTheSameElements) {
  const std::string name = GetParam();
  const auto& pipelines = CheckpointPipelines();
  auto found = pipelines.find(name);
  ASSERT_NE(found, pipelines.end());
  Dataset ds = found->second();
  ASSERT_TRUE(ds.ok()) << ds.status();
  // Reference length, to choose save points inside it.
  int total = 0;
  {
    auto it = ds.MakeIterator();
    ASSERT_TRUE(it.ok()) << it.status();
    total = static_cast<int>(Continue(it->get(), kLimit).size());
  }
  ASSERT_GT(total, 0);
  for (int save_at : {0, 1, 7, total / 2, total - 1, total}) {
    if (save_at < 0 || save_at > total) continue;
    SCOPED_TRACE(absl::StrCat(name, ": saved after ", save_at, " of ", total));
    auto first = ds.MakeIterator();
    ASSERT_TRUE(first.ok()) << first.status();
    std::vector<std::string> before = Continue(first->get(), save_at);
    ASSERT_EQ(static_cast<int>(before.size()), save_at);
    absl::StatusOr<std::string> state = (*first)->SaveState();
    ASSERT_TRUE(state.ok()) << state.status();
    const std::vector<std::string> expected = Continue(first->get(), kLimit);

    for (bool same_object : {false, true}) {
      Dataset other = same_object ? ds : found->second();
      auto restored = other.MakeIterator();
      ASSERT_TRUE(restored.ok()) << restored.status();
      ASSERT_TRUE((*restored)->RestoreState(*state).ok()) << (*restored)->RestoreState(*state);
      EXPECT_EQ(Continue(restored->get(), kLimit), expected)
          << (same_object ? "same Dataset object" : "new Dataset object");
    }
  }
}

std::vector<std::string> PipelineNames() {
  std::vector<std::string> names;
  for (const auto& [name, make] : CheckpointPipelines()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Pipelines, ExactResumeTest, ::testing::ValuesIn(PipelineNames()),
                         [](const auto& info) { return info.param; });

// A restored iterator can itself be saved and restored again (its state records where it is,
// not where it started).
TEST(CheckpointTest, RestoredIteratorsSaveAgain) {
  Dataset ds = Dataset::Range(1000).Shuffle(64, 3).Map(testing::AddFn(1), 3).Batch(5).Repeat(2);
  auto a = ds.MakeIterator();
  ASSERT_TRUE(a.ok());
  Continue(a->get(), 37);
  auto s1 = (*a)->SaveState();
  ASSERT_TRUE(s1.ok()) << s1.status();
  auto b = ds.MakeIterator();
  ASSERT_TRUE((*b)->RestoreState(*s1).ok());
  Continue(b->get(), 150);
  auto s2 = (*b)->SaveState();
  ASSERT_TRUE(s2.ok()) << s2.status();
  const std::vector<std::string> expected = Continue(b->get(), kLimit);
  auto c = ds.MakeIterator();
  ASSERT_TRUE((*c)->RestoreState(*s2).ok());
  EXPECT_EQ(Continue(c->get(), kLimit), expected);
  EXPECT_FALSE(expected.empty());
}

TEST(CheckpointTest, NondeterministicPipelinesRefuseToSave) {
  for (const Dataset& ds :
       {Dataset::Range(10).Shuffle(4), Dataset::Range(10).Map(testing::AddFn(1), 2, false)}) {
    auto it = ds.MakeIterator();
    ASSERT_TRUE(it.ok());
    auto state = (*it)->SaveState();
    EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition) << state.status();
  }
  auto it = Dataset::Range(10).Shuffle(4).MakeIterator();
  auto state = (*it)->SaveState();
  EXPECT_THAT(state.status().message(), HasSubstr("Shuffle without a seed"));
}

TEST(CheckpointTest, StateOfAnotherPipelineIsRejectedNamingTheStage) {
  auto a = Dataset::Range(100).Batch(4).MakeIterator();
  Continue(a->get(), 3);
  auto state = (*a)->SaveState();
  ASSERT_TRUE(state.ok());
  auto b = Dataset::Range(100).Batch(8).MakeIterator();
  absl::Status s = (*b)->RestoreState(*state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("Batch"));
  auto c = Dataset::Range(100).Shuffle(10, 1).MakeIterator();
  s = (*c)->RestoreState(*state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("another pipeline"));
}

TEST(CheckpointTest, CorruptOrTruncatedStateIsDataLoss) {
  auto a = Dataset::Range(100).MakeIterator();
  Continue(a->get(), 3);
  std::string state = *(*a)->SaveState();
  std::string flipped = state;
  flipped[flipped.size() - 6] ^= 1;
  auto b = Dataset::Range(100).MakeIterator();
  EXPECT_EQ((*b)->RestoreState(flipped).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*b)->RestoreState(state.substr(0, state.size() - 3)).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ((*b)->RestoreState("not a state").code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, RestoreNeedsANewIterator) {
  auto a = Dataset::Range(100).MakeIterator();
  std::string state = *(*a)->SaveState();
  Continue(a->get(), 1);
  EXPECT_EQ((*a)->RestoreState(state).code(), absl::StatusCode::kFailedPrecondition);
}

// The images pipeline's shape (files -> parallel decode -> shuffle(10000) -> batch ->
// prefetch) with a cheap function: the state does not grow with the buffers.
TEST(CheckpointTest, ImagePipelineStateIsAtMostFourKilobytes) {
  std::vector<std::string> names;
  for (int i = 0; i < 20000; ++i) names.push_back(absl::StrCat("image-", i, ".jpg"));
  MapFn decode = [](Element e) -> absl::StatusOr<Element> {
    Tensor image(DType::kUInt8, Shape{8, 8, 3});
    const std::string& name = *e[0].data<std::string>();
    for (int64_t i = 0; i < image.num_elements(); ++i) {
      image.data<uint8_t>()[i] = static_cast<uint8_t>(name.size() + i);
    }
    return Element({image, Tensor::Scalar<int64_t>(static_cast<int64_t>(name.size()))});
  };
  Dataset ds = Dataset::FromTensorSlices(Element({Tensor::FromVector(names)}))
                   .Shuffle(20000, 1)
                   .Map(decode, kAutotune)
                   .Shuffle(10000, 7)
                   .Batch(64, true)
                   .Prefetch(kAutotune)
                   .Repeat();
  auto it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  Continue(it->get(), 500);  // into the second epoch
  auto state = (*it)->SaveState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_LE(state->size(), 4096u);
  RecordProperty("state_bytes", static_cast<int>(state->size()));
  const std::vector<std::string> expected = Continue(it->get(), 20);
  auto restored = ds.MakeIterator();
  ASSERT_TRUE((*restored)->RestoreState(*state).ok());
  EXPECT_EQ(Continue(restored->get(), 20), expected);
}

// Parallel stages pull ahead of their consumer; their state is a snapshot of their input's
// position taken before the worker's turn that the consumer is in, plus the units pulled since
// in that turn. A restore under a Prefetch or a parallel Map moves the synchronous stages
// below by position and computes again only that part of a turn (a turn is sized to ~50 us
// of work), not the elements before it.
TEST(CheckpointTest, RestoreBelowAParallelStageDoesNotRerunFunctions) {
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  MapFn counted = [calls](Element e) -> absl::StatusOr<Element> {
    calls->fetch_add(1);
    return e;
  };
  for (int parallel : {kSequential, 3}) {
    SCOPED_TRACE(parallel);
    Dataset ds = Dataset::Range(1000)
                     .Map(counted, parallel)
                     .Filter([](const Element& e) {
                       return absl::StatusOr<bool>(*e[0].data<int64_t>() % 3 != 0);
                     })
                     .Batch(10)
                     .Repeat(3)
                     .Prefetch(2);
    auto it = ds.MakeIterator();
    ASSERT_TRUE(it.ok());
    calls->store(0);
    Continue(it->get(), 190);  // near the end of the third epoch
    const int64_t calls_before_save = calls->load();
    auto state = (*it)->SaveState();
    ASSERT_TRUE(state.ok()) << state.status();
    const std::vector<std::string> expected = Continue(it->get(), 30);
    auto restored = ds.MakeIterator();
    calls->store(0);
    ASSERT_TRUE((*restored)->RestoreState(*state).ok());
    // A replay from the start would call it calls_before_save (2,850+) times; the restore
    // computes a turn of the Prefetch (2 batches, 30 calls) and, with a parallel map, that
    // map's read-ahead (at most its 3 workers x 128-element turns).
    EXPECT_GT(calls_before_save, 2800);
    EXPECT_LT(calls->load(), 30 + 3 * 128 + 30)
        << "function calls during RestoreState, against " << calls_before_save << " before";
    EXPECT_EQ(Continue(restored->get(), 30), expected);
  }
}

// An Interleave (sequential or parallel) records which input element each open input came
// from and the open inputs' positions: a restore remakes only those (the inputs finished
// before are not read again).
TEST(CheckpointTest, InterleaveRestoreRemakesOnlyTheOpenInputs) {
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  DatasetFn counted = [made](Element e) -> absl::StatusOr<Dataset> {
    made->fetch_add(1);
    const int64_t v = *e[0].data<int64_t>();
    return Dataset::Range(v * 100, v * 100 + 5 + v % 3);
  };
  for (int parallel : {kSequential, 3}) {
    SCOPED_TRACE(parallel);
    Dataset ds = Dataset::Range(60).Interleave(counted, 3, 2, parallel).Batch(4);
    auto it = ds.MakeIterator();
    ASSERT_TRUE(it.ok());
    made->store(0);
    Continue(it->get(), 50);
    ASSERT_GT(made->load(), 30);
    auto state = (*it)->SaveState();
    ASSERT_TRUE(state.ok()) << state.status();
    const std::vector<std::string> expected = Continue(it->get(), kLimit);
    auto restored = ds.MakeIterator();
    made->store(0);
    ASSERT_TRUE((*restored)->RestoreState(*state).ok());
    EXPECT_LE(made->load(), 3) << "inputs made during RestoreState";
    EXPECT_EQ(Continue(restored->get(), kLimit), expected);
  }
}

int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Restoring mid-epoch of a 1M-element shuffled pipeline replays 600k shuffle steps from the
// source: under a second. CPU time of this thread (the replay runs on it), so that the other
// processes of a busy machine do not make it flaky.
TEST(CheckpointTest, RestoreMidEpochOfAMillionElementShuffleTakesUnderASecond) {
  Dataset ds = Dataset::Range(1000000).Shuffle(10000, 11).Batch(100).Prefetch(2);
  auto it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  Continue(it->get(), 6000);  // 600k elements
  auto state = (*it)->SaveState();
  ASSERT_TRUE(state.ok()) << state.status();
  const std::vector<std::string> expected = Continue(it->get(), 3);
  auto restored = ds.MakeIterator();
  const int64_t start = ThreadCpuNanos();
  ASSERT_TRUE((*restored)->RestoreState(*state).ok());
  const int64_t restore_ns = ThreadCpuNanos() - start;
  EXPECT_EQ(Continue(restored->get(), 3), expected);
  EXPECT_LT(restore_ns, 1'000'000'000) << "restore took " << restore_ns / 1e6 << " ms of CPU";
  RecordProperty("restore_cpu_ms", static_cast<int>(restore_ns / 1000000));
}

// Another process: the helper binary saves after N elements and writes the continuation, then
// a second run of it restores the state and writes its continuation.
TEST(CheckpointTest, ResumesInAnotherProcess) {
  const std::string state = testing::TempPath("state.bin");
  const std::string expected = testing::TempPath("expected.txt");
  const std::string actual = testing::TempPath("actual.txt");
  for (const char* pipeline : {"shuffle_repeat_batch", "parallel_map_batch_fused", "tfrecord_files",
                               "parallel_interleave"}) {
    SCOPED_TRACE(pipeline);
    const std::string save =
        absl::StrCat(KILN_CHECKPOINT_TOOL, " save ", pipeline, " 23 ", state, " ", expected);
    const std::string restore =
        absl::StrCat(KILN_CHECKPOINT_TOOL, " restore ", pipeline, " 0 ", state, " ", actual);
    ASSERT_EQ(std::system(save.c_str()), 0) << save;
    ASSERT_EQ(std::system(restore.c_str()), 0) << restore;
    std::ifstream a(expected), b(actual);
    std::stringstream sa, sb;
    sa << a.rdbuf();
    sb << b.rdbuf();
    EXPECT_FALSE(sa.str().empty());
    EXPECT_EQ(sa.str(), sb.str());
  }
  for (const auto& p : {state, expected, actual}) std::remove(p.c_str());
}

}  // namespace
}  // namespace kiln::data
