// File sources: TFRecord, TextLine and CSV datasets over the readers in formats/.
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/internal.h"
#include "data/nodes.h"
#include "kiln/core/status.h"
#include "kiln/data/formats/csv.h"
#include "kiln/data/formats/text_line.h"
#include "kiln/data/formats/tfrecord.h"

namespace kiln::data {
namespace {

absl::StatusOr<std::vector<std::string>> FileNames(const Element& filenames, const char* who) {
  if (filenames.size() != 1 || filenames[0].dtype() != DType::kString || filenames[0].rank() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": filenames must be one string scalar or string vector component"));
  }
  const Tensor& t = filenames[0];
  std::vector<std::string> out(t.data<std::string>(), t.data<std::string>() + t.num_elements());
  return out;
}

// Reads one file; `Reader` yields one element per Read, OutOfRange at the end.
template <typename OpenFn, typename ReadFn>
class FileReaderIterator : public IteratorBase {
 public:
  FileReaderIterator(const IteratorContext& ctx, const char* name, std::vector<std::string> files,
                     OpenFn open, ReadFn read)
      : IteratorBase(ctx, name, false),
        files_(std::move(files)),
        open_(std::move(open)),
        read_(std::move(read)) {}
  absl::Status GetNextInternal(Element* out, bool* end) override {
    while (true) {
      if (!reader_) {
        if (index_ >= files_.size()) {
          *end = true;
          return absl::OkStatus();
        }
        auto reader = open_(files_[index_++]);
        if (!reader.ok()) return reader.status();
        reader_ = std::move(*reader);
        records_in_file_ = 0;
      }
      absl::Status s = read_(reader_.get(), out);
      if (absl::IsOutOfRange(s)) {
        reader_.reset();
        continue;
      }
      if (!s.ok()) reader_.reset();  // corrupt file: move on to the next on the next call
      ++records_in_file_;
      return s;
    }
  }

  // Checkpoints: the file and the number of records read from it. A restore opens that file
  // and reads past those records (the files before it are not read at all).
  uint64_t StateConfig() const override { return ConfigFingerprint({int64_t(files_.size())}); }
  absl::Status SaveInternal(StateWriter& w) override {
    w.PutUint(index_);
    w.PutBool(reader_ != nullptr);
    w.PutInt(records_in_file_);
    return absl::OkStatus();
  }
  absl::Status RestoreInternal(StateReader& r) override {
    uint64_t index = 0;
    bool open = false;
    int64_t records = 0;
    KILN_RETURN_IF_ERROR(r.GetUint(&index));
    KILN_RETURN_IF_ERROR(r.GetBool(&open));
    KILN_RETURN_IF_ERROR(r.GetInt(&records));
    if (index > files_.size() || (open && index == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RestoreState: stage ", path(), " was saved at file ", index, " of ", files_.size()));
    }
    index_ = static_cast<size_t>(index);
    reader_.reset();
    records_in_file_ = 0;
    if (!open) return absl::OkStatus();
    auto reader = open_(files_[index_ - 1]);
    if (!reader.ok()) return reader.status();
    reader_ = std::move(*reader);
    Element scratch;
    for (; records_in_file_ < records; ++records_in_file_) {
      absl::Status s = read_(reader_.get(), &scratch);
      if (!s.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("RestoreState: ", files_[index_ - 1], " no longer has the ", records,
                         " records read from it when the state was saved (", s.message(), ")"));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::string> files_;
  size_t index_ = 0;
  int64_t records_in_file_ = 0;  // read from the open file (errors included)
  OpenFn open_;
  ReadFn read_;
  std::decay_t<decltype(std::declval<OpenFn&>()(std::string()).value())> reader_;
};

template <typename OpenFn, typename ReadFn>
std::unique_ptr<IteratorBase> MakeFileIterator(const IteratorContext& ctx, const char* name,
                                               std::vector<std::string> files, OpenFn open,
                                               ReadFn read) {
  return std::make_unique<FileReaderIterator<OpenFn, ReadFn>>(ctx, name, std::move(files),
                                                              std::move(open), std::move(read));
}

void SetStringScalar(Element* out, std::string&& value) {
  out->tensors.resize(1);
  Tensor t(DType::kString, Shape{});
  *t.data<std::string>() = std::move(value);
  out->tensors[0] = std::move(t);
  out->names.reset();
}

class TFRecordNode : public DatasetNode {
 public:
  TFRecordNode(std::vector<std::string> files, formats::Compression c, int64_t buffer)
      : files_(std::move(files)), compression_(c), buffer_(buffer) {}
  std::string name() const override { return "TFRecord"; }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto c = compression_;
    size_t buffer = static_cast<size_t>(buffer_);
    return MakeFileIterator(
        ctx, "TFRecord", files_,
        [c, buffer](const std::string& f) { return formats::RecordReader::Open(f, c, buffer); },
        [](formats::RecordReader* r, Element* out) {
          // Read into the string the element keeps (Read reserves its exact size): reading
          // into a reused string and copying it out cost a second copy of every record.
          std::string record;
          KILN_RETURN_IF_ERROR(r->Read(&record));
          SetStringScalar(out, std::move(record));
          return absl::OkStatus();
        });
  }

 private:
  std::vector<std::string> files_;
  formats::Compression compression_;
  int64_t buffer_;
};

class TextLineNode : public DatasetNode {
 public:
  TextLineNode(std::vector<std::string> files, formats::Compression c)
      : files_(std::move(files)), compression_(c) {}
  std::string name() const override { return "TextLine"; }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto c = compression_;
    return MakeFileIterator(
        ctx, "TextLine", files_,
        [c](const std::string& f) { return formats::LineReader::Open(f, c); },
        [](formats::LineReader* r, Element* out) {
          std::string line;
          KILN_RETURN_IF_ERROR(r->Read(&line));
          SetStringScalar(out, std::move(line));
          return absl::OkStatus();
        });
  }

 private:
  std::vector<std::string> files_;
  formats::Compression compression_;
};

class CsvNode : public DatasetNode {
 public:
  CsvNode(std::vector<std::string> files, formats::Compression c, std::vector<Tensor> defaults,
          formats::CsvOptions options)
      : files_(std::move(files)),
        compression_(c),
        defaults_(std::move(defaults)),
        options_(std::move(options)) {}
  std::string name() const override { return "Csv"; }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto c = compression_;
    return MakeFileIterator(
        ctx, "Csv", files_,
        [c, defaults = defaults_, options = options_](const std::string& f) {
          return formats::CsvReader::Open(f, c, defaults, options);
        },
        [](formats::CsvReader* r, Element* out) {
          out->names.reset();
          return r->Read(&out->tensors);
        });
  }

 private:
  std::vector<std::string> files_;
  formats::Compression compression_;
  std::vector<Tensor> defaults_;
  formats::CsvOptions options_;
};

}  // namespace

Dataset Dataset::TFRecord(Element filenames, const std::string& compression, int64_t buffer_size,
                          int num_parallel_reads) {
  auto files = FileNames(filenames, "TFRecord");
  if (!files.ok()) return Dataset(files.status());
  auto c = formats::ParseCompression(compression);
  if (!c.ok()) return Dataset(Annotate(c.status(), "TFRecord"));
  if (buffer_size <= 0) buffer_size = 256 << 10;
  if (num_parallel_reads == kSequential || num_parallel_reads == 1 || files->size() <= 1) {
    return Dataset(std::make_shared<TFRecordNode>(std::move(*files), *c, buffer_size));
  }
  // tf.data: parallel reads interleave the files, one record from each in turn.
  const std::string compression_name = compression;
  Dataset names = FromTensorSlices(Element({Tensor::FromVector(*files)}));
  const int cycle = num_parallel_reads == kAutotune ? kAutotune : num_parallel_reads;
  return names.Interleave(
      [compression_name, buffer_size](Element f) -> absl::StatusOr<Dataset> {
        return TFRecord(std::move(f), compression_name, buffer_size, kSequential);
      },
      cycle, 1, num_parallel_reads);
}

Dataset Dataset::TextLine(Element filenames, const std::string& compression) {
  auto files = FileNames(filenames, "TextLine");
  if (!files.ok()) return Dataset(files.status());
  auto c = formats::ParseCompression(compression);
  if (!c.ok()) return Dataset(Annotate(c.status(), "TextLine"));
  return Dataset(std::make_shared<TextLineNode>(std::move(*files), *c));
}

Dataset Dataset::Csv(Element filenames, CsvOptions options) {
  auto files = FileNames(filenames, "Csv");
  if (!files.ok()) return Dataset(files.status());
  auto c = formats::ParseCompression(options.compression);
  if (!c.ok()) return Dataset(Annotate(c.status(), "Csv"));
  if (options.record_defaults.empty()) {
    return Dataset(
        absl::InvalidArgumentError("Csv: record_defaults must name at least one column"));
  }
  formats::CsvOptions parse;
  parse.header = options.header;
  parse.field_delim = options.field_delim;
  parse.use_quote_delim = options.use_quote_delim;
  parse.na_value = options.na_value;
  parse.select_cols = options.select_cols;
  return Dataset(std::make_shared<CsvNode>(std::move(*files), *c,
                                           std::move(options.record_defaults), std::move(parse)));
}

}  // namespace kiln::data
