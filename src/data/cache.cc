// Cache: in memory (shared by the iterators of one Dataset object) or in a file that later
// iterators, and later runs of the program, read instead of the input.
//
// As in tf.data the cache is complete only after one iteration has reached the end of the
// input; an iteration that stops early leaves no cache behind (the file is written under a
// temporary name and renamed at the end). While one iterator writes the cache, others made at
// the same time read the input directly.
//
// File format (ours; tf.data's tensor-bundle cache is not a compatibility goal):
//   "KILNCACHE1\n" then per element: u32 component count, per component u8 dtype, u8 rank,
//   i64 dims[rank], then the data (numbers: raw bytes; strings: u64 length + bytes each);
//   finally u32 0xFFFFFFFF and u64 element count.
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data/internal.h"
#include "kiln/core/status.h"

namespace kiln::data {
namespace {

constexpr char kMagic[] = "KILNCACHE1\n";
constexpr uint32_t kEndMarker = 0xFFFFFFFFu;

struct MemoryCache {
  std::mutex mutex;
  bool complete = false;
  bool writing = false;
  std::vector<Element> elements;
};

class FileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<FileWriter>> Open(const std::string& path) {
    std::string tmp = absl::StrCat(path, ".tmp-", getpid(), "-",
                                   reinterpret_cast<uintptr_t>(&path) & 0xffff);
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
      return absl::NotFoundError(absl::StrCat("Cache: cannot create cache file ", tmp, ": ",
                                              std::strerror(errno)));
    }
    auto w = std::unique_ptr<FileWriter>(new FileWriter(f, path, tmp));
    w->Put(kMagic, sizeof(kMagic) - 1);
    return w;
  }
  ~FileWriter() {
    if (file_ != nullptr) {
      std::fclose(file_);
      std::remove(tmp_.c_str());
    }
  }
  void Write(const Element& e) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    Put(&n, 4);
    for (const Tensor& t : e.tensors) {
      const uint8_t dtype = static_cast<uint8_t>(t.dtype());
      const uint8_t rank = static_cast<uint8_t>(t.rank());
      Put(&dtype, 1);
      Put(&rank, 1);
      for (int64_t d : t.shape().dims()) Put(&d, 8);
      if (t.dtype() == DType::kString) {
        for (const std::string& s : t.span<std::string>()) {
          const uint64_t len = s.size();
          Put(&len, 8);
          Put(s.data(), s.size());
        }
      } else {
        Put(t.raw_data(), t.byte_size());
      }
    }
    ++count_;
  }
  absl::Status Finish() {
    Put(&kEndMarker, 4);
    Put(&count_, 8);
    const bool ok = !failed_ && std::fclose(file_) == 0;
    file_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::remove(tmp_.c_str());
      return absl::DataLossError(absl::StrCat("Cache: cannot write cache file ", path_));
    }
    return absl::OkStatus();
  }

 private:
  FileWriter(FILE* f, std::string path, std::string tmp)
      : file_(f), path_(std::move(path)), tmp_(std::move(tmp)) {}
  void Put(const void* p, size_t n) {
    if (n > 0 && std::fwrite(p, 1, n, file_) != n) failed_ = true;
  }
  FILE* file_;
  std::string path_, tmp_;
  uint64_t count_ = 0;
  bool failed_ = false;
};

class FileReader {
 public:
  // nullptr (no error) when there is no complete cache file at `path`.
  static absl::StatusOr<std::unique_ptr<FileReader>> Open(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return std::unique_ptr<FileReader>();
    auto r = std::unique_ptr<FileReader>(new FileReader(f, path));
    char magic[sizeof(kMagic) - 1];
    if (!r->Get(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
      return absl::DataLossError(absl::StrCat("Cache: ", path, " is not a kiln cache file"));
    }
    return r;
  }
  ~FileReader() { std::fclose(file_); }
  absl::Status Read(Element* out, bool* end) {
    const long offset = std::ftell(file_);
    uint32_t n;
    if (!Get(&n, 4)) return Corrupt(offset);
    if (n == kEndMarker) {
      *end = true;
      return absl::OkStatus();
    }
    out->tensors.clear();
    out->names.reset();
    for (uint32_t c = 0; c < n; ++c) {
      uint8_t dtype, rank;
      if (!Get(&dtype, 1) || !Get(&rank, 1)) return Corrupt(offset);
      Shape shape;
      for (int i = 0; i < rank; ++i) {
        int64_t d;
        if (!Get(&d, 8) || d < 0) return Corrupt(offset);
        shape.push_back(d);
      }
      Tensor t(static_cast<DType>(dtype), shape);
      if (t.dtype() == DType::kString) {
        for (std::string& s : t.span<std::string>()) {
          uint64_t len;
          if (!Get(&len, 8) || len > (uint64_t{1} << 40)) return Corrupt(offset);
          s.resize(len);
          if (!Get(s.data(), len)) return Corrupt(offset);
        }
      } else if (!Get(t.raw_data(), t.byte_size())) {
        return Corrupt(offset);
      }
      out->tensors.push_back(std::move(t));
    }
    return absl::OkStatus();
  }

 private:
  FileReader(FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  bool Get(void* p, size_t n) { return n == 0 || std::fread(p, 1, n, file_) == n; }
  absl::Status Corrupt(long offset) const {
    return absl::DataLossError(
        absl::StrCat("Cache: truncated or corrupt cache file ", path_, " at byte offset ", offset));
  }
  FILE* file_;
  std::string path_;
};

class CacheNode : public DatasetNode {
 public:
  CacheNode(Dataset input, std::string filename)
      : input_(std::move(input)), filename_(std::move(filename)),
        memory_(std::make_shared<MemoryCache>()) {}
  std::string name() const override { return "Cache"; }
  int64_t Cardinality() const override { return input_.Cardinality(); }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto it = std::make_unique<It>(ctx, this);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const CacheNode* node)
        : IteratorBase(ctx, "Cache", false), node_(node) {}
    ~It() override {
      if (writing_memory_) {
        std::lock_guard<std::mutex> lock(node_->memory_->mutex);
        node_->memory_->writing = false;
      }
    }
    absl::Status Init() {
      if (node_->filename_.empty()) {
        std::lock_guard<std::mutex> lock(node_->memory_->mutex);
        if (node_->memory_->complete) {
          reading_memory_ = true;
          return absl::OkStatus();
        }
        if (!node_->memory_->writing) {
          node_->memory_->writing = true;
          writing_memory_ = true;
        }
        return absl::OkStatus();
      }
      KILN_ASSIGN_OR_RETURN(file_reader_, FileReader::Open(node_->filename_));
      if (!file_reader_) {
        KILN_ASSIGN_OR_RETURN(file_writer_, FileWriter::Open(node_->filename_));
      }
      return absl::OkStatus();
    }
    absl::Status GetNextInternal(Element* out, bool* end) override {
      if (reading_memory_) {
        // Complete caches are immutable, so no lock is needed to read them.
        const auto& elements = node_->memory_->elements;
        if (index_ >= elements.size()) {
          *end = true;
          return absl::OkStatus();
        }
        *out = elements[index_++];
        return absl::OkStatus();
      }
      if (file_reader_) return file_reader_->Read(out, end);
      if (!input_) {
        // The input is built lazily: a reader of a complete cache never builds it.
        KILN_ASSIGN_OR_RETURN(input_, MakeInputIterator(node_->input_, InputContext()));
      }
      KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
      if (*end) {
        if (writing_memory_) {
          std::lock_guard<std::mutex> lock(node_->memory_->mutex);
          node_->memory_->elements = std::move(pending_);
          node_->memory_->complete = true;
          node_->memory_->writing = false;
          writing_memory_ = false;
        }
        if (file_writer_) {
          absl::Status s = file_writer_->Finish();
          file_writer_.reset();
          KILN_RETURN_IF_ERROR(s);
        }
        return absl::OkStatus();
      }
      if (writing_memory_) pending_.push_back(*out);
      if (file_writer_) file_writer_->Write(*out);
      return absl::OkStatus();
    }

   private:
    const CacheNode* node_;
    std::unique_ptr<IteratorBase> input_;
    bool reading_memory_ = false;
    bool writing_memory_ = false;
    size_t index_ = 0;
    std::vector<Element> pending_;
    std::unique_ptr<FileReader> file_reader_;
    std::unique_ptr<FileWriter> file_writer_;
  };

  Dataset input_;
  std::string filename_;
  std::shared_ptr<MemoryCache> memory_;
};

}  // namespace

Dataset Dataset::Cache(const std::string& filename) const {
  if (!ok()) return *this;
  return Dataset(std::make_shared<CacheNode>(*this, filename));
}

}  // namespace kiln::data
