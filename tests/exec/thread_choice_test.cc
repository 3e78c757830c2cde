// Threads per step (thread_choice.h): the choice reaches the kernel (its ComputeContext, the
// OpenMP team its parallel loops and oneDNN run on, and the OpenMP count its primitives are
// created under), forced choices are deterministic, and 1 and N threads compute the same.
#include "kiln/exec/thread_choice.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/determinism.h"
#include "kiln/exec/plan.h"
#include "kiln/kernels/openmp_threads.h"

namespace kiln::exec {
namespace {

// What the probe kernel saw, per plan: tests compile one plan at a time.
struct ProbeRecord {
  std::atomic<int> reshape_omp_threads{0};  // OpenMP count during the last Reshape
  std::atomic<int> compute_intra_op{0};     // ComputeContext::intra_op_threads
  std::atomic<int> compute_omp_threads{0};  // OpenMP count during Compute
  std::atomic<int> loop_threads{0};         // distinct threads that ran its ParallelFor
  std::atomic<int> computes{0};
};
ProbeRecord& Probe() {
  static ProbeRecord record;
  return record;
}

// threadtest::Probe: y = x + 1 in a ParallelFor of one element per chunk, recording the
// threads it was given (a real plan runs it; only the op is made up).
class ProbeKernel : public kernels::OpKernel {
 public:
  absl::Status Reshape(kernels::ReshapeContext& ctx) override {
    Probe().reshape_omp_threads = kernels::OpenMpMaxThreads();
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }
  absl::Status Compute(kernels::ComputeContext& ctx) const override {
    Probe().compute_intra_op = ctx.intra_op_threads;
    Probe().compute_omp_threads = kernels::OpenMpMaxThreads();
    ++Probe().computes;
    const float* x = ctx.inputs[0].data<float>();
    float* y = ctx.outputs[0].data<float>();
    std::mutex mu;
    std::set<std::thread::id> ids;
    ctx.ParallelFor(ctx.outputs[0].num_elements(), 1, [&](int64_t begin, int64_t end) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] + 1.0f;
    });
    Probe().loop_threads = static_cast<int>(ids.size());
    return absl::OkStatus();
  }
};

void RegisterProbe() {
  static const bool registered = [] {
    kernels::KernelRegistry::Global()
        .Register("threadtest", "Probe",
                  [](const ir::Node&) -> absl::StatusOr<std::unique_ptr<kernels::OpKernel>> {
                    return std::unique_ptr<kernels::OpKernel>(new ProbeKernel());
                  })
        .IgnoreError();
    return true;
  }();
  (void)registered;
}

// threadtest::SlowOnTeams: y = x + 1 (y = x + its thread count, when `follows_threads`, as a
// reduction split across threads rounds by the count), after spinning 200 us whenever it is
// given more than one thread. Timing always finds one thread faster (no team is woken, so a
// busy machine does not make the step look large), so what decides is whether the bits agree.
class SlowOnTeamsKernel : public kernels::OpKernel {
 public:
  explicit SlowOnTeamsKernel(bool follows_threads) : follows_threads_(follows_threads) {}
  absl::Status Reshape(kernels::ReshapeContext& ctx) override {
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }
  absl::Status Compute(kernels::ComputeContext& ctx) const override {
    if (ctx.intra_op_threads > 1) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    const float* x = ctx.inputs[0].data<float>();
    float* y = ctx.outputs[0].data<float>();
    const float add = follows_threads_ ? static_cast<float>(ctx.intra_op_threads) : 1.0f;
    for (int64_t i = 0, n = ctx.outputs[0].num_elements(); i < n; ++i) y[i] = x[i] + add;
    return absl::OkStatus();
  }

 private:
  const bool follows_threads_;
};

void RegisterSlowOnTeams() {
  static const bool registered = [] {
    for (bool counts : {false, true}) {
      kernels::KernelRegistry::Global()
          .Register(
              "threadtest", counts ? "SlowOnTeamsFollowsThreads" : "SlowOnTeams",
              [counts](const ir::Node&) -> absl::StatusOr<std::unique_ptr<kernels::OpKernel>> {
                return std::unique_ptr<kernels::OpKernel>(new SlowOnTeamsKernel(counts));
              })
          .IgnoreError();
    }
    return true;
  }();
  (void)registered;
}

std::shared_ptr<const ir::Graph> SlowGraph(const std::string& op) {
  RegisterSlowOnTeams();
  auto g = std::make_shared<ir::Graph>();
  const ir::ValueId x = g->AddValue("x", ir::TensorType::Of(DType::kFloat32, {64}));
  g->inputs = {x};
  g->outputs = {g->node(g->AddNode(op, {x}, 1, {}, "slow", "threadtest")).outputs[0]};
  return g;
}

CompileOptions Options(ThreadChoiceMode mode, int threads = 2) {
  CompileOptions options;
  options.intra_op_threads = threads;
  options.intra_op_openmp = threads > 1;
  options.thread_choice = mode;
  return options;
}

std::shared_ptr<const ir::Graph> ProbeGraph() {
  RegisterProbe();
  auto g = std::make_shared<ir::Graph>();
  const ir::ValueId x = g->AddValue("x", ir::TensorType::Of(DType::kFloat32, {64}));
  g->inputs = {x};
  g->outputs = {g->node(g->AddNode("Probe", {x}, 1, {}, "probe", "threadtest")).outputs[0]};
  return g;
}

Tensor Filled(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

std::vector<float> RunProbe(const CompiledPlan& plan) {
  std::vector<Tensor> outputs;
  EXPECT_TRUE(plan.Run({Filled(Shape{64}, 1)}, &outputs).ok());
  return std::vector<float>(outputs[0].data<float>(), outputs[0].data<float>() + 64);
}

TEST(ThreadChoiceTest, ParsesTheModesAndRejectsOthersNamingTheVariable) {
  EXPECT_EQ(*ParseThreadChoiceMode("auto"), ThreadChoiceMode::kAuto);
  EXPECT_EQ(*ParseThreadChoiceMode("off"), ThreadChoiceMode::kOff);
  EXPECT_EQ(*ParseThreadChoiceMode("one"), ThreadChoiceMode::kOne);
  absl::StatusOr<ThreadChoiceMode> bad = ParseThreadChoiceMode("fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("KILN_THREAD_CHOICE=fast"), std::string::npos);
}

TEST(ThreadChoiceTest, EnvironmentSelectsTheModeAndABadValueFailsTheCompile) {
  ASSERT_EQ(setenv("KILN_THREAD_CHOICE", "one", 1), 0);
  EXPECT_EQ(*ResolveThreadChoiceMode(ThreadChoiceMode::kEnvironment), ThreadChoiceMode::kOne);
  auto plan =
      CompiledPlan::Compile(ProbeGraph(), {Shape{64}}, Options(ThreadChoiceMode::kEnvironment));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().thread_choice, ThreadChoiceMode::kOne);
  EXPECT_EQ((*plan)->stats().one_thread_steps, 1);

  ASSERT_EQ(setenv("KILN_THREAD_CHOICE", "sometimes", 1), 0);
  auto bad =
      CompiledPlan::Compile(ProbeGraph(), {Shape{64}}, Options(ThreadChoiceMode::kEnvironment));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(unsetenv("KILN_THREAD_CHOICE"), 0);
  EXPECT_EQ(*ResolveThreadChoiceMode(ThreadChoiceMode::kEnvironment), ThreadChoiceMode::kAuto);
}

// The choice is not a label: the kernel computes on the team size chosen, and its primitives
// are created under that OpenMP count (oneDNN keeps the count of creation).
TEST(ThreadChoiceTest, OneThreadReachesTheKernelsContextOpenMpAndReshape) {
  const int before = kernels::OpenMpMaxThreads();
  auto plan = CompiledPlan::Compile(ProbeGraph(), {Shape{64}}, Options(ThreadChoiceMode::kOne));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Probe().reshape_omp_threads.load(), 1);
  const std::vector<float> one = RunProbe(**plan);
  EXPECT_EQ(Probe().compute_intra_op.load(), 1);
  EXPECT_EQ(Probe().compute_omp_threads.load(), 1);
  EXPECT_EQ(Probe().loop_threads.load(), 1);
  EXPECT_NE((*plan)->DebugString().find("threads 1"), std::string::npos) << (*plan)->DebugString();
  // The calling thread's own OpenMP count is left as it was.
  EXPECT_EQ(kernels::OpenMpMaxThreads(), before);

  auto off = CompiledPlan::Compile(ProbeGraph(), {Shape{64}}, Options(ThreadChoiceMode::kOff));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(Probe().reshape_omp_threads.load(), 2);
  EXPECT_EQ((*off)->stats().one_thread_steps, 0);
  const std::vector<float> two = RunProbe(**off);
  EXPECT_EQ(Probe().compute_intra_op.load(), 2);
  EXPECT_EQ(Probe().compute_omp_threads.load(), 2);
  EXPECT_EQ(Probe().loop_threads.load(), 2);
  EXPECT_NE((*off)->DebugString().find("threads 2"), std::string::npos);
  EXPECT_EQ(one, two);
  EXPECT_EQ(kernels::OpenMpMaxThreads(), before);
}

// A plan compiled for 4 threads on a thread whose OpenMP default is another count still
// creates (Reshape) and runs on 4: the count of creation is the plan's, not the machine's.
TEST(ThreadChoiceTest, ReshapeRunsUnderThePlansThreadCount) {
  kernels::ScopedOpenMpThreads machine(3);
  auto plan = CompiledPlan::Compile(ProbeGraph(), {Shape{64}}, Options(ThreadChoiceMode::kOff, 4));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Probe().reshape_omp_threads.load(), 4);
  RunProbe(**plan);
  EXPECT_EQ(Probe().compute_omp_threads.load(), 4);
  EXPECT_EQ(Probe().loop_threads.load(), 4);
  EXPECT_EQ(kernels::OpenMpMaxThreads(), 3);
}

// A small CNN block of real kernels (oneDNN convolutions, a depthwise one, pool, elementwise).
std::shared_ptr<const ir::Graph> ConvGraph() {
  auto g = std::make_shared<ir::Graph>();
  uint32_t seed = 10;
  auto weights = [&](Shape shape) {
    ++seed;
    return g->AddConstant(absl::StrCat("w", seed), Filled(std::move(shape), seed));
  };
  auto op = [&](const std::string& name, std::vector<ir::ValueId> in,
                std::map<std::string, ir::Attribute> attrs = {}) {
    return g
        ->node(g->AddNode(name, std::move(in), 1, std::move(attrs),
                          absl::StrCat(name, g->num_nodes())))
        .outputs[0];
  };
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  const ir::ValueId x = g->AddValue("x", ir::TensorType::Of(DType::kFloat32, {1, 8, 20, 20}));
  g->inputs = {x};
  ir::ValueId v = op("Conv", {x, weights({16, 8, 3, 3}), weights({16})}, {{"pads", pads}});
  v = op("Relu", {v});
  const ir::ValueId dw =
      op("Conv", {v, weights({16, 1, 3, 3})}, {{"pads", pads}, {"group", int64_t{16}}});
  v = op("Add", {v, dw});
  v = op("MaxPool", {v},
         {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  v = op("Conv", {v, weights({32, 16, 1, 1})});
  g->outputs = {op("Sigmoid", {v})};
  return g;
}

std::vector<float> RunConv(ThreadChoiceMode mode, PlanStats* stats, std::string* debug) {
  auto plan = CompiledPlan::Compile(ConvGraph(), {Shape{1, 8, 20, 20}}, Options(mode));
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  std::vector<Tensor> outputs;
  EXPECT_TRUE((*plan)->Run({Filled(Shape{1, 8, 20, 20}, 7)}, &outputs).ok());
  *stats = (*plan)->stats();
  *debug = (*plan)->DebugString();
  const Tensor& y = outputs[0];
  return std::vector<float>(y.data<float>(), y.data<float>() + y.num_elements());
}

TEST(ThreadChoiceTest, RealKernelsComputeTheSameOnOneAndOnTwoThreads) {
  PlanStats off_stats, one_stats, auto_stats;
  std::string off_debug, one_debug, auto_debug;
  const std::vector<float> off = RunConv(ThreadChoiceMode::kOff, &off_stats, &off_debug);
  const std::vector<float> one = RunConv(ThreadChoiceMode::kOne, &one_stats, &one_debug);
  const std::vector<float> chosen = RunConv(ThreadChoiceMode::kAuto, &auto_stats, &auto_debug);
  ASSERT_EQ(off.size(), size_t{32 * 10 * 10});
  ASSERT_EQ(one.size(), off.size());
  ASSERT_EQ(chosen.size(), off.size());
  // Each output element is computed by one thread whatever the team size, but a primitive
  // created for another thread count may block its reduction differently: a few ulps.
  for (size_t i = 0; i < off.size(); ++i) {
    ASSERT_NEAR(one[i], off[i], 1e-5f) << i;
    ASSERT_NEAR(chosen[i], off[i], 1e-5f) << i;
  }
  EXPECT_EQ(off_stats.one_thread_steps, 0);
  EXPECT_EQ(one_stats.one_thread_steps, one_stats.steps);
  EXPECT_EQ(auto_stats.thread_choice, ThreadChoiceMode::kAuto);
  // The elementwise steps take microseconds: they are timed both ways (the convolutions too,
  // unless the other cores are so busy that their faster of two runs exceeds 1 ms).
  EXPECT_GE(auto_stats.thread_timed_steps, 1) << auto_debug;
  EXPECT_LE(auto_stats.thread_timed_steps, auto_stats.steps) << auto_debug;
  EXPECT_GT(auto_stats.thread_choice_ns, 0);
  EXPECT_LE(auto_stats.thread_choice_ns, ThreadChooser::kPlanBudgetNs + 1'000'000'000);
  EXPECT_NE(auto_debug.find(" us, 1 "), std::string::npos) << auto_debug;
}

TEST(ThreadChoiceTest, ForcedChoiceIsTheSameOnEveryCompile) {
  PlanStats a, b;
  std::string debug_a, debug_b;
  RunConv(ThreadChoiceMode::kOne, &a, &debug_a);
  RunConv(ThreadChoiceMode::kOne, &b, &debug_b);
  EXPECT_EQ(a.one_thread_steps, b.one_thread_steps);
  EXPECT_EQ(a.thread_timed_steps, 0);
  // DebugString names arena offsets and threads per step: equal plans print the same.
  EXPECT_EQ(debug_a, debug_b);
}

TEST(ThreadChoiceTest, SingleThreadPlansChooseNothing) {
  PlanStats stats;
  auto plan = CompiledPlan::Compile(ConvGraph(), {Shape{1, 8, 20, 20}},
                                    Options(ThreadChoiceMode::kAuto, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().thread_timed_steps, 0);
  EXPECT_EQ((*plan)->stats().thread_choice_ns, 0);
  EXPECT_EQ((*plan)->DebugString().find("threads"), std::string::npos);
}

// One thread is kept when it is faster and computes the same bits as N.
TEST(ThreadChoiceTest, FasterOneThreadIsKeptWhenItComputesTheSame) {
  auto plan = CompiledPlan::Compile(SlowGraph("SlowOnTeams"), {Shape{64}},
                                    Options(ThreadChoiceMode::kAuto));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().one_thread_steps, 1) << (*plan)->DebugString();
  EXPECT_EQ((*plan)->DebugString().find("other bits"), std::string::npos);
}

// A kernel whose result follows the thread count (as a reduction split across threads does)
// keeps N even though 1 thread is faster: a timed choice must not change what the plan
// computes, or two loads of one model could answer differently.
TEST(ThreadChoiceTest, OneThreadThatComputesOtherBitsIsNotChosen) {
  auto chosen = CompiledPlan::Compile(SlowGraph("SlowOnTeamsFollowsThreads"), {Shape{64}},
                                      Options(ThreadChoiceMode::kAuto));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ((*chosen)->stats().one_thread_steps, 0);
  EXPECT_NE((*chosen)->DebugString().find("threads 2 (N "), std::string::npos)
      << (*chosen)->DebugString();
  EXPECT_NE((*chosen)->DebugString().find("1 thread computes other bits"), std::string::npos)
      << (*chosen)->DebugString();
  auto off = CompiledPlan::Compile(SlowGraph("SlowOnTeamsFollowsThreads"), {Shape{64}},
                                   Options(ThreadChoiceMode::kOff));
  ASSERT_TRUE(off.ok()) << off.status();
  const Tensor x = Filled(Shape{64}, 3);
  std::vector<Tensor> a, b;
  ASSERT_TRUE((*chosen)->Run({x}, &a).ok());
  ASSERT_TRUE((*off)->Run({x}, &b).ok());
  EXPECT_EQ(0, std::memcmp(a[0].raw_data(), b[0].raw_data(), a[0].byte_size()));
}

// TensorFlow's variable turns op determinism on, and so the timing off.
TEST(ThreadChoiceTest, TfDeterministicOpsTurnsTimingOff) {
  ASSERT_EQ(setenv("TF_DETERMINISTIC_OPS", "1", 1), 0);
  EXPECT_TRUE(OpDeterminismEnabled());
  EXPECT_EQ(*ResolveThreadChoiceMode(ThreadChoiceMode::kAuto), ThreadChoiceMode::kOff);
  ASSERT_EQ(setenv("TF_DETERMINISTIC_OPS", "0", 1), 0);
  EXPECT_FALSE(OpDeterminismEnabled());
  EXPECT_EQ(*ResolveThreadChoiceMode(ThreadChoiceMode::kAuto), ThreadChoiceMode::kAuto);
  ASSERT_EQ(unsetenv("TF_DETERMINISTIC_OPS"), 0);
}

// Op determinism (TF_DETERMINISTIC_OPS=1, kiln/core/determinism.h) turns timing off; forced
// modes stay. Last in the file: determinism stays on in this process.
TEST(ThreadChoiceTest, OpDeterminismTurnsTimingOff) {
  EnableOpDeterminism();
  EXPECT_EQ(*ResolveThreadChoiceMode(ThreadChoiceMode::kAuto), ThreadChoiceMode::kOff);
  EXPECT_EQ(*ResolveThreadChoiceMode(ThreadChoiceMode::kOne), ThreadChoiceMode::kOne);
  auto plan = CompiledPlan::Compile(SlowGraph("SlowOnTeams"), {Shape{64}},
                                    Options(ThreadChoiceMode::kAuto));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().thread_choice, ThreadChoiceMode::kOff);
  EXPECT_EQ((*plan)->stats().thread_timed_steps, 0);
  EXPECT_EQ((*plan)->stats().one_thread_steps, 0);
}

}  // namespace
}  // namespace kiln::exec
