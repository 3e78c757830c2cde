#include "data_images.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kiln/core/clock.h"
#include "kiln/core/status.h"
#include "kiln/core/thread_pool.h"
#include "kiln/data/dataset.h"
#include "kiln/data/formats/example.h"
#include "kiln/data/formats/functions.h"
#include "kiln/data/formats/image.h"
#include "kiln/data/formats/tfrecord.h"
#include "tensorflow/core/example/example.pb.h"

namespace kiln::tool {
namespace {

namespace fs = std::filesystem;
using data::Dataset;
using data::Element;
using data::kAutotune;
using data::formats::Compression;
using data::formats::ExampleSpec;
using data::formats::FeatureSpec;

constexpr int kImageSize = 224;
constexpr int kNumClasses = 10;
constexpr int kManifestVersion = 1;
// ImageNet statistics on the [0, 1] scale, as torchvision's Normalize is used with them.
const std::vector<float> kMean = {0.485f, 0.456f, 0.406f};
const std::vector<float> kStddev = {0.229f, 0.224f, 0.225f};

struct Flags {
  int64_t images = 2048;
  int64_t shards = 16;
  std::string data_dir = "/tmp/kiln-images";
  int64_t epochs = 3;
  int64_t batch_size = 64;
  int cpu_budget = 0;
  double bound_seconds = 2.0;
  bool peer = false;
  std::string peer_python = "/usr/bin/python3";
  std::string peer_script = "bench/peers/torch_dataloader.py";
};

void PrintHelp() {
  std::printf(
      "kiln data bench --experiment=images [options]\n"
      "  --images=N         images in the data set (default 2048)\n"
      "  --shards=N         TFRecord shards (default 16)\n"
      "  --data_dir=PATH    where the shards and JPEG files are written once and reused\n"
      "                     (default /tmp/kiln-images)\n"
      "  --epochs=N         passes over the data (default 3)\n"
      "  --batch_size=N     (default 64)\n"
      "  --cpu_budget=N     cores for the pipeline and the bound (default: all)\n"
      "  --bound_seconds=S  minimum duration of the single-thread measurement (default 2)\n"
      "  --peer             also run PyTorch's DataLoader (bench/peers/torch_dataloader.py)\n"
      "  --peer_python=PATH --peer_script=PATH\n"
      "  --json             one JSON object per line\n");
}

absl::Status ParseFlags(const std::vector<std::string>& args, Flags* flags, bool* help) {
  for (const std::string& arg : args) {
    std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    auto int_flag = [&](int64_t* out) -> absl::Status {
      if (!absl::SimpleAtoi(value, out) || *out < 0) {
        return absl::InvalidArgumentError(absl::StrCat("bad value for ", key, ": \"", value, "\""));
      }
      return absl::OkStatus();
    };
    int64_t v = 0;
    if (key == "--help" || key == "-h") {
      *help = true;
    } else if (key == "--experiment" || key == "--json") {
      // Handled by `kiln data bench`.
    } else if (key == "--images") {
      KILN_RETURN_IF_ERROR(int_flag(&flags->images));
    } else if (key == "--shards") {
      KILN_RETURN_IF_ERROR(int_flag(&flags->shards));
    } else if (key == "--data_dir") {
      flags->data_dir = value;
    } else if (key == "--epochs") {
      KILN_RETURN_IF_ERROR(int_flag(&flags->epochs));
    } else if (key == "--batch_size") {
      KILN_RETURN_IF_ERROR(int_flag(&flags->batch_size));
    } else if (key == "--cpu_budget") {
      KILN_RETURN_IF_ERROR(int_flag(&v));
      flags->cpu_budget = static_cast<int>(v);
    } else if (key == "--bound_seconds") {
      if (!absl::SimpleAtod(value, &flags->bound_seconds)) {
        return absl::InvalidArgumentError(absl::StrCat("bad value for --bound_seconds: ", value));
      }
    } else if (key == "--peer") {
      flags->peer = true;
    } else if (key == "--peer_python") {
      flags->peer_python = value;
    } else if (key == "--peer_script") {
      flags->peer_script = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag for the images experiment: ", arg));
    }
  }
  if (flags->images < 1 || flags->shards < 1 || flags->epochs < 1 || flags->batch_size < 1) {
    return absl::InvalidArgumentError("--images, --shards, --epochs and --batch_size must be >= 1");
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------------- the data set

// A deterministic picture with real structure (gradients, shapes, texture, sensor-like noise)
// so that JPEG sizes and decode costs resemble photographs rather than flat test patterns.
Tensor SynthesizeImage(int64_t index) {
  std::mt19937 rng(static_cast<uint32_t>(index * 7919 + 17));
  std::uniform_int_distribution<int> width_dist(200, 500), height_dist(200, 400), byte(0, 255);
  const int w = width_dist(rng), h = height_dist(rng);
  Tensor image(DType::kUInt8, Shape{h, w, 3});
  uint8_t* p = image.data<uint8_t>();
  float corner[4][3];
  for (auto& c : corner) {
    for (float& v : c) v = static_cast<float>(byte(rng));
  }
  struct Blob {
    float cx, cy, rx, ry;
    float color[3];
    bool ellipse;
  };
  std::vector<Blob> blobs(3 + rng() % 6);
  for (Blob& b : blobs) {
    b.cx = static_cast<float>(rng() % w);
    b.cy = static_cast<float>(rng() % h);
    b.rx = 10.f + static_cast<float>(rng() % (w / 3));
    b.ry = 10.f + static_cast<float>(rng() % (h / 3));
    for (float& v : b.color) v = static_cast<float>(byte(rng));
    b.ellipse = rng() % 2 == 0;
  }
  const float freq_x = 0.02f + static_cast<float>(rng() % 100) / 1000.f;
  const float freq_y = 0.02f + static_cast<float>(rng() % 100) / 1000.f;
  std::uniform_int_distribution<int> noise(-6, 6);
  for (int y = 0; y < h; ++y) {
    const float fy = static_cast<float>(y) / (h - 1);
    for (int x = 0; x < w; ++x) {
      const float fx = static_cast<float>(x) / (w - 1);
      float rgb[3];
      for (int c = 0; c < 3; ++c) {
        rgb[c] = (1 - fx) * (1 - fy) * corner[0][c] + fx * (1 - fy) * corner[1][c] +
                 (1 - fx) * fy * corner[2][c] + fx * fy * corner[3][c];
      }
      for (const Blob& b : blobs) {
        const float dx = (x - b.cx) / b.rx, dy = (y - b.cy) / b.ry;
        const bool inside =
            b.ellipse ? dx * dx + dy * dy < 1 : std::abs(dx) < 1 && std::abs(dy) < 1;
        if (inside) {
          for (int c = 0; c < 3; ++c) rgb[c] = 0.3f * rgb[c] + 0.7f * b.color[c];
        }
      }
      const float texture = 18.f * std::sin(freq_x * x) * std::cos(freq_y * y);
      for (int c = 0; c < 3; ++c) {
        *p++ = static_cast<uint8_t>(std::clamp(rgb[c] + texture + noise(rng), 0.f, 255.f));
      }
    }
  }
  return image;
}

std::string ManifestText(const Flags& flags) {
  return absl::StrCat("version=", kManifestVersion, " images=", flags.images,
                      " shards=", flags.shards, " quality=90\n");
}

std::string ShardPath(const Flags& flags, int64_t shard) {
  return absl::StrFormat("%s/tfrecord/images-%05d-of-%05d.tfrecord", flags.data_dir, shard,
                         flags.shards);
}

std::string JpegPath(const Flags& flags, int64_t index) {
  return absl::StrFormat("%s/jpeg/class_%d/img_%06d.jpg", flags.data_dir, index % kNumClasses,
                         index);
}

// Writes the shards and the JPEG files unless a complete earlier run left them.
absl::Status EnsureDataSet(const Flags& flags, bool* generated) {
  const std::string manifest_path = flags.data_dir + "/MANIFEST";
  {
    std::ifstream in(manifest_path);
    std::stringstream text;
    text << in.rdbuf();
    if (in && text.str() == ManifestText(flags)) {
      *generated = false;
      return absl::OkStatus();
    }
  }
  *generated = true;
  std::error_code ec;
  fs::remove_all(flags.data_dir + "/tfrecord", ec);
  fs::remove_all(flags.data_dir + "/jpeg", ec);
  fs::create_directories(flags.data_dir + "/tfrecord", ec);
  for (int c = 0; c < kNumClasses; ++c) {
    fs::create_directories(absl::StrCat(flags.data_dir, "/jpeg/class_", c), ec);
  }
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", flags.data_dir, ": ", ec.message()));
  }
  // Encoding is the slow part: spread the images over the cores, then write shards in order.
  std::vector<std::string> jpegs(flags.images);
  std::vector<absl::Status> errors(flags.images);
  DefaultThreadPool().ParallelFor(flags.images, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      absl::StatusOr<std::string> jpeg = data::formats::EncodeJpeg(SynthesizeImage(i), 90);
      if (!jpeg.ok()) {
        errors[i] = jpeg.status();
        continue;
      }
      jpegs[i] = *std::move(jpeg);
    }
  });
  for (const absl::Status& s : errors) KILN_RETURN_IF_ERROR(s);
  for (int64_t shard = 0; shard < flags.shards; ++shard) {
    KILN_ASSIGN_OR_RETURN(auto writer, data::formats::RecordWriter::Open(ShardPath(flags, shard),
                                                                         Compression::kNone));
    for (int64_t i = shard; i < flags.images; i += flags.shards) {
      tensorflow::Example example;
      auto& features = *example.mutable_features()->mutable_feature();
      features["image/encoded"].mutable_bytes_list()->add_value(jpegs[i]);
      features["image/class/label"].mutable_int64_list()->add_value(i % kNumClasses);
      KILN_RETURN_IF_ERROR(writer->Write(example.SerializeAsString()));
    }
    KILN_RETURN_IF_ERROR(writer->Close());
  }
  for (int64_t i = 0; i < flags.images; ++i) {
    std::ofstream out(JpegPath(flags, i), std::ios::binary);
    out.write(jpegs[i].data(), static_cast<std::streamsize>(jpegs[i].size()));
    if (!out) return absl::DataLossError(absl::StrCat("cannot write ", JpegPath(flags, i)));
  }
  std::ofstream manifest(manifest_path);
  manifest << ManifestText(flags);
  return manifest ? absl::OkStatus()
                  : absl::DataLossError(absl::StrCat("cannot write ", manifest_path));
}

// ------------------------------------------------------------------------- measurements

ExampleSpec ImageSpec() {
  ExampleSpec spec;
  spec.features.push_back(FeatureSpec::FixedLen("image/encoded", DType::kString));
  spec.features.push_back(FeatureSpec::FixedLen("image/class/label", DType::kInt64));
  return spec;
}

// parse -> decode -> resize -> normalize, the per-image work that both measurements do.
data::MapFn PerImageWork() {
  using namespace data::formats;  // NOLINT(build/namespaces): the function names read better
  return Chain({ParseExampleFn(ImageSpec()), DecodeJpegFn("image/encoded", {.channels = 3}),
                ResizeFn("image/encoded", kImageSize, kImageSize),
                NormalizeFn("image/encoded", kMean, kStddev, 1.0f / 255.0f)});
}

// CPU seconds used by the whole process (all threads) so far.
double ProcessCpuSeconds() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

int64_t PeakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

struct PipelineResult {
  double seconds = 0;
  double cpu_seconds = 0;
  int64_t images = 0;
  int64_t peak_buffered_bytes = 0;
  int64_t ram_budget_bytes = 0;
  std::string bottleneck;
};

absl::StatusOr<PipelineResult> RunPipeline(const Flags& flags, int cores) {
  const std::string pattern = flags.data_dir + "/tfrecord/images-*.tfrecord";
  Dataset ds = Dataset::ListFiles({pattern}, /*shuffle=*/false)
                   .Repeat(flags.epochs)
                   .Interleave([](Element file) { return Dataset::TFRecord(std::move(file)); },
                               kAutotune, /*block_length=*/1, kAutotune)
                   .Map(PerImageWork(), kAutotune, /*deterministic=*/false)
                   // Copying 64 images (38 MiB) into a batch is work too: in parallel.
                   .Batch(flags.batch_size, /*drop_remainder=*/false, kAutotune)
                   .Prefetch(kAutotune);
  data::Options options;
  options.cpu_budget = cores;
  KILN_ASSIGN_OR_RETURN(auto iterator, ds.MakeIterator(options));
  PipelineResult result;
  const double cpu_start = ProcessCpuSeconds();
  const int64_t start = NowNanos();
  Element batch;
  bool end = false;
  while (true) {
    KILN_RETURN_IF_ERROR(iterator->GetNext(&batch, &end));
    if (end) break;
    result.images += batch.tensors.empty() ? 0 : batch[0].dim(0);
  }
  result.seconds = static_cast<double>(NowNanos() - start) * 1e-9;
  result.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  result.peak_buffered_bytes = iterator->peak_buffered_bytes();
  result.ram_budget_bytes = iterator->ram_budget_bytes();
  result.bottleneck = iterator->Stats().bottleneck;
  return result;
}

// The same per-image work with no pipeline: read each record, then apply the functions
// directly, until every image was seen at least once and bound_seconds passed. On one thread
// this gives the bound (single-thread rate x cores). On `threads` threads at once
// (each its own shards) it measures what the cores really deliver together: shared caches,
// memory bandwidth and a host that may place two vCPUs on one physical core make that less
// than single x cores, and no pipeline can beat it.
struct SingleThreadResult {
  double images_per_second = 0;
  double cpu_seconds_per_image = 0;
};

absl::StatusOr<SingleThreadResult> BareImagesPerSecond(const Flags& flags, int threads) {
  const data::MapFn work = PerImageWork();
  std::atomic<int64_t> images{0};
  const double cpu_start = ProcessCpuSeconds();
  const int64_t start = NowNanos();
  std::vector<absl::Status> status(threads);
  auto run = [&](int t) -> absl::Status {
    std::string record;
    while (true) {
      for (int64_t shard = t; shard < flags.shards; shard += threads) {
        KILN_ASSIGN_OR_RETURN(auto reader, data::formats::RecordReader::Open(
                                               ShardPath(flags, shard), Compression::kNone));
        while (true) {
          absl::Status s = reader->Read(&record);
          if (absl::IsOutOfRange(s)) break;
          KILN_RETURN_IF_ERROR(s);
          KILN_ASSIGN_OR_RETURN(Element out, work(Element({Tensor::Scalar(record)})));
          images.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (static_cast<double>(NowNanos() - start) * 1e-9 >= flags.bound_seconds) break;
    }
    return absl::OkStatus();
  };
  if (threads == 1) {
    status[0] = run(0);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { status[t] = run(t); });
    for (std::thread& th : pool) th.join();
  }
  for (const absl::Status& s : status) KILN_RETURN_IF_ERROR(s);
  SingleThreadResult result;
  result.images_per_second = images.load() / (static_cast<double>(NowNanos() - start) * 1e-9);
  result.cpu_seconds_per_image = (ProcessCpuSeconds() - cpu_start) / images.load();
  return result;
}

absl::StatusOr<SingleThreadResult> SingleThreadImagesPerSecond(const Flags& flags) {
  return BareImagesPerSecond(flags, 1);
}

struct PeerResult {
  double images_per_second = 0;
  double cpu_ms_per_image = 0;
  double seconds = 0;
  int64_t peak_rss_bytes = 0;
};

absl::StatusOr<PeerResult> RunPeer(const Flags& flags, int cores) {
  const std::string command =
      absl::StrCat(flags.peer_python, " ", flags.peer_script, " --data_dir=", flags.data_dir,
                   "/jpeg", " --batch_size=", flags.batch_size, " --epochs=", flags.epochs,
                   " --workers=", cores, " --size=", kImageSize, " 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot run: ", command));
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int rc = ::pclose(pipe);
  PeerResult result;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, "{")) continue;
    // {"name": "images/torch", "images_per_second": X, "seconds": Y, "peak_rss_bytes": Z}
    auto number_after = [&](absl::string_view key, double* out) {
      const size_t at = line.find(absl::StrCat("\"", key, "\": "));
      if (at == absl::string_view::npos) return false;
      absl::string_view rest = line.substr(at + key.size() + 4);
      rest = rest.substr(0, rest.find_first_of(",}"));
      return absl::SimpleAtod(rest, out);
    };
    double rss = 0;
    number_after("cpu_ms_per_image", &result.cpu_ms_per_image);
    found = number_after("images_per_second", &result.images_per_second) &&
            number_after("seconds", &result.seconds);
    if (number_after("peak_rss_bytes", &rss)) result.peak_rss_bytes = static_cast<int64_t>(rss);
  }
  if (rc != 0 || !found) {
    return absl::InternalError(
        absl::StrCat("peer failed (exit ", rc, "): ", command, "\n", output));
  }
  return result;
}

}  // namespace

int RunImagesExperiment(const std::vector<std::string>& args, bool json) {
  Flags flags;
  bool help = false;
  if (absl::Status s = ParseFlags(args, &flags, &help); !s.ok()) {
    std::fprintf(stderr, "kiln data bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (help) {
    PrintHelp();
    return 0;
  }
  const int cores = flags.cpu_budget > 0 ? flags.cpu_budget : ThreadPool::HardwareConcurrency();
  // Keep freed image-sized blocks in the heap for reuse rather than returning them to the
  // kernel and faulting fresh pages in for the next image (glibc caps this threshold at
  // 32 MiB, so a 38 MiB batch is still a fresh mapping). TensorFlow and PyTorch use caching
  // allocators for the same reason. Applies to the bound measurement too.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "kiln data bench --experiment=images: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  };

  bool generated = false;
  const int64_t generate_start = NowNanos();
  if (absl::Status s = EnsureDataSet(flags, &generated); !s.ok()) return fail(s);
  if (!json) {
    std::printf(
        "images: %lld JPEG images (200x200 to 500x400, quality 90) in %lld shards in %s%s\n",
        static_cast<long long>(flags.images), static_cast<long long>(flags.shards),
        flags.data_dir.c_str(),
        generated
            ? absl::StrFormat(" (written in %.1f s)", (NowNanos() - generate_start) * 1e-9).c_str()
            : " (reused)");
    std::fflush(stdout);
  }

  // The pipeline runs first so that the peak RSS reported is the pipeline's.
  absl::StatusOr<PipelineResult> pipeline = RunPipeline(flags, cores);
  if (!pipeline.ok()) return fail(pipeline.status());
  const int64_t peak_rss = PeakRssBytes();
  absl::StatusOr<SingleThreadResult> single_result = SingleThreadImagesPerSecond(flags);
  if (!single_result.ok()) return fail(single_result.status());
  const double* single = &single_result->images_per_second;
  absl::StatusOr<SingleThreadResult> all_cores = BareImagesPerSecond(flags, cores);
  if (!all_cores.ok()) return fail(all_cores.status());
  const double bare_parallel = all_cores->images_per_second;
  const double bound = *single * cores;
  // CPU time per image, pipeline against bare work: independent of other load on the
  // machine, it shows the pipeline's own overhead even where the wall-clock bound is noisy.
  const double pipeline_cpu_per_image = pipeline->cpu_seconds / pipeline->images;
  const double single_cpu_per_image = single_result->cpu_seconds_per_image;
  const double kiln_rate = pipeline->images / pipeline->seconds;
  std::optional<PeerResult> peer;
  if (flags.peer) {
    absl::StatusOr<PeerResult> p = RunPeer(flags, cores);
    if (!p.ok()) return fail(p.status());
    peer = *p;
  }

  if (json) {
    std::printf(
        "{\"name\": \"images/kiln\", \"images_per_second\": %.1f, \"seconds\": %.3f, "
        "\"images\": %lld, \"bound_images_per_second\": %.1f, \"fraction_of_bound\": %.3f, "
        "\"peak_rss_bytes\": %lld, \"peak_buffered_bytes\": %lld, \"ram_budget_bytes\": %lld, "
        "\"cpu_ms_per_image\": %.3f, \"cores\": %d%s}\n",
        kiln_rate, pipeline->seconds, static_cast<long long>(pipeline->images), bound,
        kiln_rate / bound, static_cast<long long>(peak_rss),
        static_cast<long long>(pipeline->peak_buffered_bytes),
        static_cast<long long>(pipeline->ram_budget_bytes), pipeline_cpu_per_image * 1e3, cores,
        peer ? absl::StrFormat(", \"ratio_to_torch\": %.2f", kiln_rate / peer->images_per_second)
                   .c_str()
             : "");
    std::printf(
        "{\"name\": \"images/bound\", \"images_per_second\": %.1f, "
        "\"single_thread_images_per_second\": %.1f, \"cpu_ms_per_image\": %.3f, "
        "\"cores\": %d}\n",
        bound, *single, single_cpu_per_image * 1e3, cores);
    std::printf(
        "{\"name\": \"images/bare_all_cores\", \"images_per_second\": %.1f, "
        "\"fraction_of_bound\": %.3f, \"kiln_fraction\": %.3f, \"threads\": %d}\n",
        bare_parallel, bare_parallel / bound, kiln_rate / bare_parallel, cores);
    if (peer) {
      std::printf(
          "{\"name\": \"images/torch\", \"images_per_second\": %.1f, \"seconds\": %.3f, "
          "\"peak_rss_bytes\": %lld, \"cpu_ms_per_image\": %.3f, \"workers\": %d}\n",
          peer->images_per_second, peer->seconds, static_cast<long long>(peer->peak_rss_bytes),
          peer->cpu_ms_per_image, cores);
    }
  } else {
    std::printf("%-14s %12s %10s %14s %12s\n", "pipeline", "images/s", "seconds", "peak RSS MiB",
                "CPU ms/img");
    std::printf("%-14s %12.1f %10.3f %14.1f %12.3f\n", "images/kiln", kiln_rate, pipeline->seconds,
                peak_rss / 1048576.0, pipeline_cpu_per_image * 1e3);
    std::printf("%-14s %12.1f %10s %14s %12.3f   (%.1f images/s on one thread x %d cores)\n",
                "images/bound", bound, "-", "-", single_cpu_per_image * 1e3, *single, cores);
    std::printf("%-14s %12.1f %10s %14s %12.3f   (the same bare work on %d threads at once)\n",
                "images/bare", bare_parallel, "-", "-", all_cores->cpu_seconds_per_image * 1e3,
                cores);
    if (peer) {
      std::printf("%-14s %12.1f %10.3f %14.1f %12.3f   (DataLoader, %d workers)\n", "images/torch",
                  peer->images_per_second, peer->seconds, peer->peak_rss_bytes / 1048576.0,
                  peer->cpu_ms_per_image, cores);
    }
    std::printf(
        "kiln: %.1f%% of bound, %.1f%% of the bare work on all cores%s; bottleneck stage: %s; "
        "buffers peaked at %.1f MiB (RAM budget %.0f MiB)\n",
        100 * kiln_rate / bound, 100 * kiln_rate / bare_parallel,
        peer ? absl::StrFormat(", %.2fx PyTorch", kiln_rate / peer->images_per_second).c_str() : "",
        pipeline->bottleneck.c_str(), pipeline->peak_buffered_bytes / 1048576.0,
        pipeline->ram_budget_bytes / 1048576.0);
  }
  return 0;
}

}  // namespace kiln::tool
