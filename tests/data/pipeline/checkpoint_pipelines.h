// The deterministic pipelines whose checkpoints the tests check (checkpoint_test.cc, and
// checkpoint_tool.cc, which saves in one process and restores in another), and a printable
// form of an iterator's next position to compare continuations with.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/data/dataset.h"
#include "kiln/data/formats/tfrecord.h"

namespace kiln::data::testing {

// dtype, shape and values of every component, or the element's error.
inline std::string DescribeNext(Iterator* it, bool* end) {
  Element e;
  *end = false;
  absl::Status s = it->GetNext(&e, end);
  if (!s.ok()) return absl::StrCat("error ", s.ToString());
  if (*end) return "end";
  std::string out;
  for (size_t c = 0; c < e.size(); ++c) {
    const Tensor& t = e[c];
    absl::StrAppend(&out, c == 0 ? "" : " | ",
                    e.names ? absl::StrCat((*e.names)[c], "=") : std::string(),
                    DTypeName(t.dtype()), t.shape().ToString(), ":");
    if (t.dtype() == DType::kString) {
      for (const std::string& v : t.span<std::string>()) absl::StrAppend(&out, " '", v, "'");
    } else {
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      for (int64_t i = 0; i < t.byte_size(); ++i) absl::StrAppendFormat(&out, "%02x", p[i]);
    }
  }
  return out;
}

// Files that every process of a test run reads alike: written once under a name of their own
// (atomically, so that concurrent test processes never see half a file).
inline std::string CheckpointTestDir() {
  std::string dir = absl::StrCat("/tmp/kiln_checkpoint_test_files_", getuid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

inline std::string RecordFile(int index) {
  const std::string path = absl::StrCat(CheckpointTestDir(), "/records-", index, ".tfrecord");
  if (access(path.c_str(), R_OK) == 0) return path;
  const std::string tmp = absl::StrCat(path, ".tmp", getpid());
  auto writer = formats::RecordWriter::Open(tmp, formats::Compression::kNone);
  if (!writer.ok()) return path;
  for (int r = 0; r < 25 + 7 * index; ++r) {
    (*writer)
        ->Write(absl::StrCat("file", index, "-record", r, std::string(r % 5, 'x')))
        .IgnoreError();
  }
  (*writer)->Close().IgnoreError();
  std::rename(tmp.c_str(), path.c_str());
  return path;
}

inline std::string TextFile() {
  const std::string path = absl::StrCat(CheckpointTestDir(), "/lines.txt");
  if (access(path.c_str(), R_OK) == 0) return path;
  const std::string tmp = absl::StrCat(path, ".tmp", getpid());
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    for (int i = 0; i < 57; ++i) std::fprintf(f, "line %d%s\n", i, i % 3 == 0 ? " and more" : "");
    std::fclose(f);
  }
  std::rename(tmp.c_str(), path.c_str());
  return path;
}

inline MapFn AddOne() {
  return [](Element e) -> absl::StatusOr<Element> {
    Tensor out(DType::kInt64, e[0].shape());
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      out.data<int64_t>()[i] = e[0].data<int64_t>()[i] + 1;
    }
    e[0] = std::move(out);
    return e;
  };
}

// Fails on multiples of 13: element errors are positions a restore must keep.
inline MapFn FailOnMultiplesOf13() {
  return [](Element e) -> absl::StatusOr<Element> {
    const int64_t v = *e[0].data<int64_t>();
    if (v % 13 == 0) return absl::InvalidArgumentError(absl::StrCat("element ", v));
    return e;
  };
}

inline DatasetFn SmallRange() {
  return [](Element e) -> absl::StatusOr<Dataset> {
    const int64_t v = *e[0].data<int64_t>();
    return Dataset::Range(v * 100, v * 100 + v % 4 + 2);
  };
}

inline Dataset Records(int files, bool shuffle_files, int parallel_reads) {
  std::vector<std::string> names;
  for (int i = 0; i < files; ++i) names.push_back(RecordFile(i));
  Dataset listed = shuffle_files
                       ? Dataset::ListFiles({CheckpointTestDir() + "/records-*.tfrecord"}, true, 3)
                       : Dataset::FromTensorSlices(Element({Tensor::FromVector(names)}));
  return listed.Interleave(
      [](Element f) -> absl::StatusOr<Dataset> { return Dataset::TFRecord(std::move(f)); }, 2, 3,
      parallel_reads);
}

inline const std::map<std::string, std::function<Dataset()>>& CheckpointPipelines() {
  static const auto* pipelines = new std::map<std::string, std::function<Dataset()>>{
      {"range_shuffle_batch", [] { return Dataset::Range(1000).Shuffle(100, 42).Batch(7); }},
      {"shuffle_repeat_batch",
       [] { return Dataset::Range(500).Shuffle(64, 5).Repeat(3).Batch(10); }},
      {"shuffle_same_order_each_epoch",
       [] { return Dataset::Range(100).Shuffle(30, 5, false).Repeat(2); }},
      {"slices_skip_take_shard_enumerate",
       [] {
         std::vector<int64_t> x;
         std::vector<std::string> y;
         for (int i = 0; i < 300; ++i) {
           x.push_back(i * 3);
           y.push_back(absl::StrCat("s", i));
         }
         Element e(
             {Tensor::FromVector(x), Tensor::FromVector(y)},
             std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"x", "y"}));
         return Dataset::FromTensorSlices(e).Skip(3).Take(200).Shard(3, 1).Enumerate(5);
       }},
      {"parallel_map_batch_fused", [] { return Dataset::Range(1000).Map(AddOne(), 4).Batch(16); }},
      {"parallel_map_batch_drop_remainder",
       [] { return Dataset::Range(1000).Map(AddOne(), kAutotune).Batch(16, true).Repeat(2); }},
      {"parallel_map_prefetch_parallel_batch",
       [] { return Dataset::Range(300).Map(AddOne(), kAutotune).Prefetch(3).Batch(4, false, 2); }},
      {"map_errors_batch", [] { return Dataset::Range(200).Map(FailOnMultiplesOf13()).Batch(5); }},
      {"parallel_map_errors",
       [] { return Dataset::Range(200).Map(FailOnMultiplesOf13(), 3).Prefetch(2); }},
      {"parallel_map_errors_batch",
       [] { return Dataset::Range(200).Map(FailOnMultiplesOf13(), 3).Batch(6); }},
      {"filter_zip_concatenate",
       [] {
         Dataset evens = Dataset::Range(100).Filter([](const Element& e) -> absl::StatusOr<bool> {
           return *e[0].data<int64_t>() % 2 == 0;
         });
         return Dataset::Zip({evens, Dataset::Range(1000, 2000)})
             .Concatenate(Dataset::Zip({Dataset::Range(5), Dataset::Range(7)}));
       }},
      {"interleave", [] { return Dataset::Range(9).Interleave(SmallRange(), 3, 2); }},
      {"parallel_interleave",
       [] { return Dataset::Range(9).Interleave(SmallRange(), 3, 2, 3).Map(AddOne(), 2); }},
      {"flat_map_unbatch",
       [] { return Dataset::Range(40).FlatMap(SmallRange()).Batch(7).Unbatch().Batch(3); }},
      {"cache_in_memory_repeat", [] { return Dataset::Range(50).Map(AddOne()).Cache().Repeat(3); }},
      {"cache_file_repeat",
       [] {
         return Dataset::Range(40)
             .Cache(CheckpointTestDir() + "/cache-" + std::to_string(getpid()))
             .Repeat(2);
       }},
      {"generator",
       [] {
         return Dataset::FromGenerator([] {
                  auto next = std::make_shared<int64_t>(0);
                  return Generator([next]() -> absl::StatusOr<std::optional<Element>> {
                    if (*next >= 60) return std::optional<Element>();
                    return std::optional<Element>(Element({Tensor::Scalar<int64_t>((*next)++)}));
                  });
                })
             .Shuffle(8, 2);
       }},
      {"tfrecord_files", [] { return Records(3, false, kSequential).Repeat(2); }},
      {"tfrecord_shuffled_files_parallel",
       [] { return Records(4, true, 2).Shuffle(20, 9).Repeat(2).Batch(4); }},
      {"tfrecord_skip_take",
       [] {
         return Dataset::TFRecord(
                    Element({Tensor::FromVector<std::string>({RecordFile(0), RecordFile(1)})}))
             .Skip(5)
             .Take(40);
       }},
      {"text_lines_repeat",
       [] {
         return Dataset::TextLine(Element({Tensor::Scalar<std::string>(TextFile())})).Repeat(2);
       }},
      {"padded_batch",
       [] {
         return Dataset::Range(30)
             .Map([](Element e) -> absl::StatusOr<Element> {
               const int64_t v = *e[0].data<int64_t>();
               Tensor t(DType::kInt64, Shape{v % 4});
               for (int64_t i = 0; i < v % 4; ++i) t.data<int64_t>()[i] = v;
               return Element({t});
             })
             .PaddedBatch(4);
       }},
  };
  return *pipelines;
}

}  // namespace kiln::data::testing
