// `kiln data bench`: the tf.data performance guide's experiments, per-element overhead and
// shuffle memory, each against its structural floor (the least time the pipeline's own
// semantics allow), measured in the same run.
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "command.h"
#include "data_images.h"
#include "kiln/core/clock.h"
#include "kiln/core/thread_pool.h"
#include "kiln/data/dataset.h"

namespace kiln::tool {
namespace {

using data::Dataset;
using data::Element;
using data::kAutotune;
using data::MapFn;

constexpr int64_t kMs = 1'000'000;

// ---------------------------------------------------------------------- simulated work
// Sleeping stands in for work, to absolute deadlines. Each thread keeps the deadline of its
// last sleep and the time it woke from it. When the next sleep starts soon after that wake-up
// (within kChainSlack: only the pipeline's own code ran in between, no wait for data), it
// continues from the previous deadline instead of from "now", so that waking late (timer
// slack, a busy machine's scheduler) does not add up over hundreds of sleeps. A thread that
// waited for an element after waking starts its next sleep at "now".
constexpr int64_t kChainSlack = 100'000;  // 0.1 ms
thread_local int64_t t_deadline = 0;
thread_local int64_t t_woke = 0;

void Work(int64_t nanos) {
  const int64_t now = NowNanos();
  const bool chained = t_deadline > 0 && now - t_woke < kChainSlack;
  t_deadline = (chained ? t_deadline : now) + nanos;
  SleepUntilNanos(t_deadline);
  t_woke = NowNanos();
}

// The guide's TimeMeasuredDataset / ArtificialDataset: opening takes open_ns, then each of
// num_samples reads takes read_ns. Elements are int64 scalars (the sample index).
Dataset ArtificialDataset(int64_t num_samples, int64_t open_ns = 30 * kMs,
                          int64_t read_ns = 15 * kMs) {
  return Dataset::FromGenerator([=] {
    return [=, i = int64_t{-1}]() mutable -> absl::StatusOr<std::optional<Element>> {
      if (i < 0) {
        Work(open_ns);
        i = 0;
      }
      if (i >= num_samples) return std::optional<Element>();
      Work(read_ns);
      return std::optional<Element>(Element({Tensor::Scalar<int64_t>(i++)}));
    };
  });
}

// Sleeps per_item_ns for each item of the element (its first dimension; 1 for a scalar), as
// the guide's functions sleep 1 ms * values.shape[0].
MapFn SleepPerItem(int64_t per_item_ns) {
  return [per_item_ns](Element e) -> absl::StatusOr<Element> {
    const int64_t items = e[0].rank() == 0 ? 1 : e[0].dim(0);
    Work(per_item_ns * items);
    return e;
  };
}

// Iterates `epochs` times (a new iterator per epoch, as a Python for loop does); the
// consumer works train_ns per element. Returns seconds and counts elements.
struct RunResult {
  double seconds = 0;
  int64_t elements = 0;
  std::string stats;
};

RunResult Consume(const Dataset& ds, int epochs, int64_t train_ns, const data::Options& options) {
  RunResult r;
  t_deadline = 0;
  t_woke = 0;
  const int64_t start = NowNanos();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    auto it = ds.MakeIterator(options);
    if (!it.ok()) {
      std::fprintf(stderr, "kiln data bench: %s\n", std::string(it.status().message()).c_str());
      std::exit(1);
    }
    Element e;
    bool end = false;
    while (true) {
      absl::Status s = (*it)->GetNext(&e, &end);
      if (!s.ok()) {
        std::fprintf(stderr, "kiln data bench: %s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
      if (end) break;
      ++r.elements;
      if (train_ns > 0) Work(train_ns);
    }
    if (epoch == epochs - 1) r.stats = (*it)->Stats().ToString();
  }
  r.seconds = (NowNanos() - start) / 1e9;
  return r;
}

// ---------------------------------------------------------------------- reporting
struct Report {
  bool json = false;
  bool verbose = false;
  int failures = 0;

  void Header(const std::string& title) {
    if (json) return;
    std::printf("\n== %s ==\n", title.c_str());
    std::printf("%-28s %10s %10s %8s  %s\n", "pipeline", "seconds", "floor", "ratio", "notes");
  }
  // ratio = seconds / floor; within_pct: the target (e.g. 2 %).
  void Row(const std::string& name, double seconds, double floor, const std::string& notes,
           double within_pct = 2.0, const std::string& extra_json = "") {
    const double ratio = floor > 0 ? seconds / floor : 0;
    const bool ok = floor <= 0 || ratio <= 1 + within_pct / 100;
    if (!ok) ++failures;
    if (json) {
      std::printf(
          "{\"name\":\"%s\",\"seconds\":%.4f,\"bound_seconds\":%.4f,\"ratio\":%.4f,"
          "\"within_target\":%s%s}\n",
          name.c_str(), seconds, floor, ratio, ok ? "true" : "false", extra_json.c_str());
    } else {
      std::printf("%-28s %10.3f %10.3f %8.4f  %s%s\n", name.c_str(), seconds, floor, ratio,
                  notes.c_str(), ok ? "" : "  ** above target **");
    }
    std::fflush(stdout);
  }
  void Note(const std::string& text) {
    if (!json) std::printf("  %s\n", text.c_str());
  }
};

data::Options BenchOptions(int cpu_budget) {
  data::Options options;
  options.cpu_budget = cpu_budget;
  return options;
}

// ---------------------------------------------------------------------- experiments
void GuideExperiment(Report& report, int cpu_budget, const std::string& trace_dir) {
  report.Header("guide: the tf.data guide's closing experiment (5 epochs)");
  constexpr int kItems = 50;  // _batch_map_num_items
  auto source = [](Element) -> absl::StatusOr<Dataset> { return ArtificialDataset(kItems); };
  // naive: nothing overlaps. Per epoch: 2 opens (30 ms), 100 reads (15 ms), 100 maps
  // (1 + 0.1 ms), 100 training steps (10 ms).
  const double naive_floor = 5 * (2 * 0.030 + 100 * 0.015 + 100 * 0.0011 + 100 * 0.010);
  Dataset naive = Dataset::Range(2)
                      .FlatMap(source)
                      .Map([](Element e) -> absl::StatusOr<Element> {
                        Work(1 * kMs);  // time consuming step
                        Work(100'000);  // memory consuming step
                        return e;
                      })
                      .Batch(kItems, true)
                      .Unbatch();
  data::Options options = BenchOptions(cpu_budget);
  if (!trace_dir.empty()) options.trace_path = trace_dir + "/guide_naive.json";
  RunResult r = Consume(naive, 5, 10 * kMs, options);
  report.Row("guide/naive", r.seconds, naive_floor, "tf.data (guide): 13.20 s");
  report.Note(absl::StrFormat(
      "floor = 5 epochs x (2 x 30 ms open + 100 x 15 ms read + 100 x 1.1 ms map + 100 x 10 ms "
      "train) = %.3f s",
      naive_floor));

  // optimized. Epoch 1: the first batch needs 25 reads from each file, in parallel
  // (30 + 25 x 15 ms), then the 50 ms batch map and the 5 ms batch map; from then on the
  // 10 ms training step per element is the limit (the second batch is ready at
  // 30 + 50 x 15 + 55 ms = 835 ms, before the consumer needs it at 960 ms). Epochs 2-5 read
  // the cache; each new iterator first runs the 5 ms map on its first batch.
  const double first_batch = 0.030 + 25 * 0.015 + 0.050 + 0.005;
  const double optimized_floor = first_batch + 100 * 0.010 + 4 * (0.005 + 100 * 0.010);
  Dataset optimized = Dataset::Range(2)
                          .Interleave(source, kAutotune, 1, kAutotune)
                          .Batch(kItems, true)
                          .Map(SleepPerItem(1 * kMs), kAutotune)
                          .Cache()
                          .Map(SleepPerItem(100'000), kAutotune)
                          .Prefetch(kAutotune)
                          .Unbatch();
  if (!trace_dir.empty()) options.trace_path = trace_dir + "/guide_optimized.json";
  r = Consume(optimized, 5, 10 * kMs, options);
  report.Row("guide/optimized", r.seconds, optimized_floor, "tf.data (guide): 6.82 s");
  report.Note(absl::StrFormat(
      "floor = (30 + 25 x 15 + 50 + 5 ms) + 100 x 10 ms + 4 x (5 ms + 100 x 10 ms) = %.3f s "
      "(the issue's ~5.46 s leaves out the 4 x 5 ms epoch starts)",
      optimized_floor));
  if (report.verbose) std::printf("%s", r.stats.c_str());
}

void TechniqueExperiments(Report& report, int cpu_budget) {
  data::Options options = BenchOptions(cpu_budget);
  const int64_t train = 10 * kMs;
  report.Header(
      "techniques: the guide's single-technique experiments (3 samples, 30 ms open, "
      "15 ms read, 10 ms train; best of 5, median in the notes)");
  // Each run is only 0.2-0.4 s with 6-12 thread hand-offs, so one late wake-up on a shared
  // machine (0.5-3 ms under load) moves it by several percent: run each pipeline 5 times and
  // report the best run against the floor, with the median alongside, as timeit and
  // hyperfine do.
  // A fresh dataset per run: a filled in-memory cache would otherwise carry over.
  auto best_of = [&](const std::function<Dataset()>& make, int epochs) {
    std::vector<double> seconds;
    RunResult best;
    for (int rep = 0; rep < 5; ++rep) {
      RunResult r = Consume(make(), epochs, train, options);
      if (seconds.empty() || r.seconds < best.seconds) best = r;
      seconds.push_back(r.seconds);
    }
    std::sort(seconds.begin(), seconds.end());
    best.stats = absl::StrFormat("median %.3f s", seconds[seconds.size() / 2]);
    return best;
  };
  // prefetch (2 epochs)
  RunResult r = best_of([&] { return ArtificialDataset(3); }, 2);
  report.Row("prefetch/naive", r.seconds, 2 * (0.030 + 3 * (0.015 + 0.010)),
             absl::StrCat("floor 2 x (30 + 3 x (15 + 10) ms)", "; ", r.stats));
  r = best_of([&] { return ArtificialDataset(3).Prefetch(kAutotune); }, 2);
  report.Row(
      "prefetch/prefetched", r.seconds, 2 * (0.030 + 3 * 0.015 + 0.010),
      absl::StrCat("floor 2 x (30 + 3 x 15 + 10 ms): reads overlap training", "; ", r.stats));

  // interleave (2 epochs, two files)
  auto source = [](Element) -> absl::StatusOr<Dataset> { return ArtificialDataset(3); };
  r = best_of([&] { return Dataset::Range(2).Interleave(source, 2); }, 2);
  report.Row("interleave/sequential", r.seconds, 2 * (2 * (0.030 + 0.015 + 0.010) + 4 * 0.025),
             absl::StrCat("floor 2 x (2 x (30 + 15 + 10) + 4 x (15 + 10) ms)", "; ", r.stats));
  r = best_of([&] { return Dataset::Range(2).Interleave(source, 2, 1, kAutotune); }, 2);
  report.Row("interleave/parallel", r.seconds, 2 * (0.030 + 0.015 + 6 * 0.010),
             absl::StrCat("floor 2 x (45 ms first read + 6 x 10 ms train)", "; ", r.stats));

  // map (2 epochs, 30 ms map)
  MapFn heavy = SleepPerItem(30 * kMs);
  r = best_of([&] { return ArtificialDataset(3).Map(heavy); }, 2);
  report.Row("map/sequential", r.seconds, 2 * (0.030 + 3 * (0.015 + 0.030 + 0.010)),
             absl::StrCat("floor 2 x (30 + 3 x (15 + 30 + 10) ms)", "; ", r.stats));
  r = best_of([&] { return ArtificialDataset(3).Map(heavy, kAutotune); }, 2);
  report.Row("map/parallel", r.seconds, 2 * (0.030 + 3 * 0.015 + 0.030 + 0.010),
             absl::StrCat("floor 2 x (30 + 3 x 15 + 30 + 10 ms): last read + its map + its step",
                          "; ", r.stats));

  // cache (5 epochs)
  r = best_of([&] { return ArtificialDataset(3).Map(heavy).Cache(); }, 5);
  report.Row("cache", r.seconds, (0.030 + 3 * (0.015 + 0.030 + 0.010)) + 4 * 3 * 0.010,
             absl::StrCat("floor 195 ms first epoch + 4 x 3 x 10 ms", "; ", r.stats));

  // vectorized map (range(10000), 2 epochs, no sleeps): scalar vs batched map.
  MapFn increment = [](Element e) -> absl::StatusOr<Element> {
    Tensor out(DType::kInt64, e[0].shape());
    const int64_t* in = e[0].data<int64_t>();
    int64_t* o = out.data<int64_t>();
    for (int64_t i = 0; i < out.num_elements(); ++i) o[i] = in[i] + 1;
    e[0] = std::move(out);
    return e;
  };
  r = Consume(Dataset::Range(10000).Map(increment).Batch(256), 2, 0, options);
  const double scalar = r.seconds;
  r = Consume(Dataset::Range(10000).Batch(256).Map(increment), 2, 0, options);
  report.Row("vectorized/scalar_map", scalar, 0, "no sleep-based floor");
  report.Row("vectorized/batched_map", r.seconds, 0,
             absl::StrFormat("%.1fx faster than the scalar map", scalar / r.seconds));
}

int64_t ProcessCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void OverheadExperiment(Report& report, int cpu_budget) {
  constexpr int64_t kN = 1'000'000;
  data::Options options = BenchOptions(cpu_budget);
  if (!report.json) {
    std::printf("\n== overhead: range(1e6) -> map(+1), nanoseconds per element ==\n");
    std::printf(
        "(CPU ns: process CPU time of all threads per element, the cost that does not\n"
        " depend on what else runs on the machine; wall ns: elapsed time per element)\n");
    std::printf("%-32s %10s %10s %10s  %s\n", "pipeline", "seconds", "wall ns", "CPU ns",
                "target (CPU ns)");
  }
  // +1 in place: the element's tensor is fresh from Range, so the function owns it.
  MapFn plus_one = [](Element e) -> absl::StatusOr<Element> {
    int64_t* p = e[0].data<int64_t>();
    for (int64_t i = 0; i < e[0].num_elements(); ++i) ++p[i];
    return e;
  };
  struct Case {
    std::string name;
    Dataset ds;
    int64_t elements_per_output;
    double target_ns;
  };
  const int cores = cpu_budget > 0 ? cpu_budget : ThreadPool::HardwareConcurrency();
  std::vector<Case> cases = {
      {"overhead/range", Dataset::Range(kN), 1, 0},
      {"overhead/sync_map", Dataset::Range(kN).Map(plus_one), 1, 100},
      {"overhead/parallel_map", Dataset::Range(kN).Map(plus_one, cores), 1, 1000},
      {"overhead/parallel_map_autotune", Dataset::Range(kN).Map(plus_one, kAutotune), 1, 1000},
      {"overhead/batched_sync_map", Dataset::Range(kN).Batch(1024).Map(plus_one), 1024, 0},
      {"overhead/batched_parallel_map",
       Dataset::Range(kN).Batch(1024, false, kAutotune).Map(plus_one, kAutotune), 1024, 0},
  };
  for (Case& c : cases) {
    double best_wall = 1e9, best_cpu = 1e9;
    for (int rep = 0; rep < 3; ++rep) {  // best of 3: the machine is shared
      const int64_t cpu0 = ProcessCpuNanos();
      RunResult r = Consume(c.ds, 1, 0, options);
      best_cpu = std::min(best_cpu, (ProcessCpuNanos() - cpu0) / 1e9);
      best_wall = std::min(best_wall, r.seconds);
    }
    const double wall_ns = best_wall * 1e9 / kN;
    const double cpu_ns = best_cpu * 1e9 / kN;
    const bool ok = c.target_ns <= 0 || cpu_ns < c.target_ns;
    if (!ok) ++report.failures;
    if (report.json) {
      std::printf(
          "{\"name\":\"%s\",\"seconds\":%.4f,\"bound_seconds\":0,"
          "\"wall_ns_per_element\":%.1f,\"cpu_ns_per_element\":%.1f,"
          "\"elements_per_second\":%.0f,\"target_ns\":%.0f,\"within_target\":%s}\n",
          c.name.c_str(), best_wall, wall_ns, cpu_ns, kN / best_wall, c.target_ns,
          ok ? "true" : "false");
    } else {
      std::printf(
          "%-32s %10.3f %10.1f %10.1f  %s\n", c.name.c_str(), best_wall, wall_ns, cpu_ns,
          c.target_ns > 0
              ? absl::StrFormat("< %.0f%s", c.target_ns, ok ? "" : "  ** above target **").c_str()
              : "");
    }
    std::fflush(stdout);
  }
}

// Resident set size now and the peak since the last ResetPeakRss(), in bytes.
int64_t ReadStatusBytes(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key)) * 1024;
  }
  return 0;
}
void ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

void ShuffleExperiment(Report& report, int cpu_budget) {
  if (!report.json) {
    std::printf("\n== shuffle: shuffle(buffer = 1e6) peak RSS against the payload ==\n");
    std::printf("%-28s %10s %12s %12s %8s\n", "pipeline", "seconds", "payload MB", "peak RSS MB",
                "ratio");
  }
  constexpr int64_t kN = 1'000'000;
  struct Case {
    std::string name;
    int64_t record_bytes;
  };
  for (const Case& c : {Case{"shuffle/int64", 8}, Case{"shuffle/1KB_records", 1024}}) {
    Dataset ds = Dataset::Range(kN);
    if (c.record_bytes != 8) {
      const int64_t bytes = c.record_bytes;
      ds = ds.Map([bytes](Element e) -> absl::StatusOr<Element> {
        Tensor t(DType::kUInt8, Shape{bytes});
        std::memset(t.raw_data(), static_cast<int>(*e[0].data<int64_t>() & 0xff), bytes);
        return Element({t});
      });
    }
    ds = ds.Shuffle(kN, 1);
    ResetPeakRss();
    const int64_t base = ReadStatusBytes("VmRSS:");
    RunResult r = Consume(ds, 1, 0, BenchOptions(cpu_budget));
    const int64_t peak = ReadStatusBytes("VmHWM:") - base;
    const double payload = static_cast<double>(kN * c.record_bytes);
    const double ratio = peak / payload;
    const bool ok = ratio <= 1.2;
    if (!ok) ++report.failures;
    if (report.json) {
      std::printf(
          "{\"name\":\"%s\",\"seconds\":%.4f,\"bound_seconds\":0,\"payload_bytes\":%.0f,"
          "\"peak_rss_bytes\":%" PRId64 ",\"rss_ratio\":%.3f,\"within_target\":%s}\n",
          c.name.c_str(), r.seconds, payload, peak, ratio, ok ? "true" : "false");
    } else {
      std::printf("%-28s %10.3f %12.1f %12.1f %8.3f%s\n", c.name.c_str(), r.seconds, payload / 1e6,
                  peak / 1e6, ratio, ok ? "" : "  ** above 1.2x **");
    }
    std::fflush(stdout);
  }
}

void PrintUsage() {
  std::printf(
      "usage: kiln data bench [--experiment=NAME] [--json] [--cpu_budget=N] [--verbose]\n"
      "                       [--trace_dir=DIR]\n"
      "experiments: guide, techniques, overhead, shuffle, images, all (default: all but "
      "images)\n"
      "  guide       the tf.data guide's closing experiment, naive and optimized, 5 epochs\n"
      "  techniques  prefetch, sequential/parallel interleave, sequential/parallel map, cache,\n"
      "              vectorized map, each against its structural floor\n"
      "  overhead    range(1e6) -> map(+1): ns per element, synchronous, parallel, batched\n"
      "  shuffle     shuffle(1e6) of int64 and of 1 KB records: peak RSS / payload\n"
      "  images      JPEG TFRecords -> decode -> resize -> batch (kiln data bench "
      "--experiment=images --help)\n"
      "Sleeps stand in for work and run to absolute deadlines (clock_nanosleep TIMER_ABSTIME).\n"
      "Exit status 1 when a figure misses its target.\n");
}

int RunBench(const std::vector<std::string>& args) {
  std::string experiment = "all";
  Report report;
  int cpu_budget = 0;
  std::string trace_dir;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "--experiment") {
      experiment = value;
    } else if (key == "--json") {
      report.json = true;
    } else if (key == "--verbose") {
      report.verbose = true;
    } else if (key == "--trace_dir") {
      trace_dir = value;
    } else if (key == "--cpu_budget") {
      if (!absl::SimpleAtoi(value, &cpu_budget) || cpu_budget < 0) {
        std::fprintf(stderr, "kiln data bench: bad value for --cpu_budget: %s\n", value.c_str());
        return 2;
      }
    } else if (key == "--help" || key == "-h") {
      if (experiment == "images") return RunImagesExperiment(args, report.json);
      PrintUsage();
      return 0;
    } else if (experiment != "images") {
      // Flags of the images experiment are checked by it.
      bool images_later = false;
      for (const std::string& a : args) images_later |= a == "--experiment=images";
      if (!images_later) {
        std::fprintf(stderr, "kiln data bench: unknown flag %s\n\n", arg.c_str());
        PrintUsage();
        return 2;
      }
    }
  }
  if (experiment == "images") return RunImagesExperiment(args, report.json);
  // Worker threads inherit the timer slack: 1 ns instead of Linux's default 50 us, so that a
  // sleep wakes when asked.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const bool all = experiment == "all";
  bool known = all;
  if (all || experiment == "guide") {
    known = true;
    GuideExperiment(report, cpu_budget, trace_dir);
  }
  if (all || experiment == "techniques") {
    known = true;
    TechniqueExperiments(report, cpu_budget);
  }
  if (all || experiment == "overhead") {
    known = true;
    OverheadExperiment(report, cpu_budget);
  }
  if (all || experiment == "shuffle") {
    known = true;
    ShuffleExperiment(report, cpu_budget);
  }
  if (!known) {
    std::fprintf(stderr, "kiln data bench: unknown experiment \"%s\"\n\n", experiment.c_str());
    PrintUsage();
    return 2;
  }
  return report.failures > 0 ? 1 : 0;
}

int RunDataCommand(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::printf("usage: kiln data bench [options]   (kiln data bench --help)\n");
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "bench") return RunBench({args.begin() + 1, args.end()});
  std::fprintf(stderr, "kiln data: unknown subcommand \"%s\"\n", args[0].c_str());
  return 2;
}

}  // namespace

KILN_REGISTER_COMMAND("data", "input pipelines: `kiln data bench` runs the pipeline benchmarks",
                      RunDataCommand);

}  // namespace kiln::tool
