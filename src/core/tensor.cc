#include "kiln/core/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln {

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::ToString() const { return absl::StrCat("[", absl::StrJoin(dims_, ", "), "]"); }

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(dims, ", "), "] has a negative dimension"));
    }
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(dims, ", "),
                                                     "] has more elements than fit in 63 bits"));
    }
  }
  return n;
}

absl::StatusOr<size_t> CheckedByteSize(DType dtype, const Shape& shape) {
  auto n = CheckedNumElements(shape.dims());
  if (!n.ok()) return n.status();
  const int64_t element =
      static_cast<int64_t>(dtype == DType::kString ? sizeof(std::string) : DTypeSize(dtype));
  int64_t bytes;
  if (__builtin_mul_overflow(*n, element, &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(dtype), shape.ToString(), " needs more bytes than fit in 63 bits"));
  }
  return static_cast<size_t>(bytes);
}

namespace {

// Round up so that aligned_alloc's size requirement holds and vector loops may read a full
// register past the last element without faulting.
size_t RoundedSize(size_t bytes) {
  const size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  return rounded == 0 ? kTensorAlignment : rounded;
}

// Keeps recently freed large blocks for reuse. glibc serves blocks above its mmap threshold
// (at most 32 MiB) with a fresh mmap and unmaps them on free, and returns freed memory at the
// top of its per-thread heaps to the kernel, so every batch of a pipeline (64 images of
// 224x224x3 floats = 38 MiB) and many per-image tensors were page-faulted and zeroed by the
// kernel again: about a sixth of the image pipeline's CPU time. TensorFlow's BFC allocator
// and PyTorch's caching allocator avoid the same cost the same way. Blocks are reused only
// for the exact same rounded size (pipelines and plans allocate the same shapes over and
// over); the cache holds at most kCacheLimitBytes and evicts the least recently freed
// blocks first, so it never grows memory without bound.
// Thread safety: Take and Give may be called from any thread at once (tensors are freed on
// whichever thread drops the last reference); mu_ guards the lists.
class LargeBlockCache {
 public:
  static constexpr size_t kMinBytes = size_t{256} << 10;
  static constexpr size_t kCacheLimitBytes = size_t{512} << 20;

  void* Take(size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_size_.find(rounded);
    if (it == by_size_.end()) return nullptr;
    void* block = it->second->block;
    lru_.erase(it->second);
    by_size_.erase(it);
    cached_bytes_ -= rounded;
    return block;
  }

  void Give(void* block, size_t rounded) {
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (rounded > kCacheLimitBytes / 4) {
        evicted.push_back(block);
      } else {
        lru_.push_front(Entry{block, rounded});
        by_size_.emplace(rounded, lru_.begin());
        cached_bytes_ += rounded;
        while (cached_bytes_ > kCacheLimitBytes) {
          const Entry& oldest = lru_.back();
          auto range = by_size_.equal_range(oldest.bytes);
          for (auto it = range.first; it != range.second; ++it) {
            if (it->second == std::prev(lru_.end())) {
              by_size_.erase(it);
              break;
            }
          }
          cached_bytes_ -= oldest.bytes;
          evicted.push_back(oldest.block);
          lru_.pop_back();
        }
      }
    }
    for (void* b : evicted) std::free(b);  // outside the lock: munmap can be slow
  }

 private:
  struct Entry {
    void* block;
    size_t bytes;
  };
  std::mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recently freed first
  std::multimap<size_t, std::list<Entry>::iterator> by_size_ ABSL_GUARDED_BY(mu_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Under sanitizers every block goes back to the allocator, so use-after-free is still caught.
constexpr bool kCacheLargeBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kCacheLargeBlocks = false;
#else
constexpr bool kCacheLargeBlocks = true;
#endif
#else
constexpr bool kCacheLargeBlocks = true;
#endif

LargeBlockCache& BlockCache() {
  static auto* cache = new LargeBlockCache();  // never destroyed: buffers may outlive main
  return *cache;
}

void* AllocateBlock(size_t rounded) {
  if (kCacheLargeBlocks && rounded >= LargeBlockCache::kMinBytes) {
    if (void* block = BlockCache().Take(rounded)) return block;
  }
  return std::aligned_alloc(kTensorAlignment, rounded);
}

void FreeBlock(void* block, size_t rounded) {
  if (kCacheLargeBlocks && rounded >= LargeBlockCache::kMinBytes) {
    BlockCache().Give(block, rounded);
    return;
  }
  std::free(block);
}

}  // namespace

std::shared_ptr<Buffer> Buffer::Allocate(size_t bytes, bool zero) {
  const size_t rounded = RoundedSize(bytes);
  // Small tensors (scalars, pipeline elements) are allocated and freed per element, often on
  // different threads: the Buffer object and its data share one allocation, which saves a
  // malloc/free pair per tensor (allocation was a quarter of a parallel map's per-element
  // CPU time).
  constexpr size_t kHeader =
      (sizeof(Buffer) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded <= 1024) {
    void* block = std::aligned_alloc(kTensorAlignment, kHeader + rounded);
    if (block == nullptr) throw std::bad_alloc();
    Buffer* raw = new (block) Buffer();
    raw->data_ = static_cast<char*>(block) + kHeader;
    raw->size_ = bytes;
    if (zero) std::memset(raw->data_, 0, rounded);
    return std::shared_ptr<Buffer>(raw, [](Buffer* b) {
      b->~Buffer();
      std::free(b);
    });
  }
  std::shared_ptr<Buffer> buffer(new Buffer());
  buffer->data_ = AllocateBlock(rounded);
  if (buffer->data_ == nullptr) throw std::bad_alloc();
  if (zero) std::memset(buffer->data_, 0, rounded);
  buffer->size_ = bytes;
  buffer->owned_ = true;
  return buffer;
}

std::shared_ptr<Buffer> Buffer::AllocateStrings(size_t count) {
  auto buffer = Allocate(count * sizeof(std::string));
  auto* strings = static_cast<std::string*>(buffer->data_);
  for (size_t i = 0; i < count; ++i) new (&strings[i]) std::string();
  buffer->string_count_ = count;
  return buffer;
}

std::shared_ptr<Buffer> Buffer::Wrap(void* data, size_t bytes, std::function<void()> release) {
  std::shared_ptr<Buffer> buffer(new Buffer());
  buffer->data_ = data;
  buffer->size_ = bytes;
  buffer->release_ = std::move(release);
  return buffer;
}

Buffer::~Buffer() {
  if (string_count_ > 0) {
    auto* strings = static_cast<std::string*>(data_);
    for (size_t i = 0; i < string_count_; ++i) strings[i].~basic_string();
  }
  if (owned_) FreeBlock(data_, RoundedSize(size_));
  if (release_) release_();
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  // A wrapped-around count would allocate a small buffer that kernels then overrun.
  if (!CheckedByteSize(dtype, shape_).ok()) throw std::bad_alloc();
  const size_t n = static_cast<size_t>(shape_.num_elements());
  buffer_ =
      dtype == DType::kString ? Buffer::AllocateStrings(n) : Buffer::Allocate(n * DTypeSize(dtype));
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer, size_t byte_offset)
    : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)), offset_(byte_offset) {}

absl::StatusOr<Tensor> Tensor::Allocate(DType dtype, Shape shape) {
  auto bytes = CheckedByteSize(dtype, shape);
  if (!bytes.ok()) return bytes.status();
  Shape requested = shape;
  try {
    return Tensor(dtype, std::move(requested));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", *bytes, " bytes for ",
                                                     DTypeName(dtype), shape.ToString()));
  }
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  if (dtype == DType::kString) return Tensor(dtype, std::move(shape));
  if (!CheckedByteSize(dtype, shape).ok()) throw std::bad_alloc();
  const size_t n = static_cast<size_t>(shape.num_elements());
  return Tensor(dtype, std::move(shape), Buffer::Allocate(n * DTypeSize(dtype), /*zero=*/true));
}

template <>
Tensor Tensor::FromVector<bool>(const std::vector<bool>& values, Shape shape) {
  Tensor t(DType::kBool, std::move(shape));
  bool* out = t.data<bool>();
  const int64_t n = std::min<int64_t>(t.num_elements(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < n; ++i) out[i] = values[i];
  return t;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  const int64_t row_elements = shape_.dim(0) == 0 ? 0 : num_elements() / shape_.dim(0);
  Shape shape = shape_;
  shape.set_dim(0, end - begin);
  return Tensor(dtype_, std::move(shape), buffer_,
                offset_ + static_cast<size_t>(begin * row_elements) * DTypeSize(dtype_));
}

Tensor Tensor::SubTensor(int64_t index) const {
  Tensor row = Slice(index, index + 1);
  row.shape_.erase(0);
  return row;
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (shape.num_elements() != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape a tensor of shape ",
                                                   shape_.ToString(), " (", num_elements(),
                                                   " elements) to ", shape.ToString()));
  }
  return Tensor(dtype_, std::move(shape), buffer_, offset_);
}

Tensor Tensor::Clone() const {
  if (!valid()) return Tensor();
  Tensor copy(dtype_, shape_);
  copy.CopyFrom(*this);
  return copy;
}

void Tensor::CopyFrom(const Tensor& other) {
  if (dtype_ == DType::kString) {
    const std::string* src = other.data<std::string>();
    std::string* dst = data<std::string>();
    for (int64_t i = 0; i < num_elements(); ++i) dst[i] = src[i];
  } else if (byte_size() > 0) {
    std::memcpy(raw_data(), other.raw_data(), byte_size());
  }
}

namespace {

template <typename T>
std::string ElementString(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return absl::StrCat("\"", v.size() > 32 ? v.substr(0, 32) + "..." : v, "\"");
  } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return absl::StrCat(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
    return absl::StrCat(static_cast<int>(v));
  } else {
    return absl::StrCat(v);
  }
}

template <typename T>
double AsDouble(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return 0;
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

}  // namespace

std::string Tensor::DebugString(int max_elements) const {
  if (!valid()) return "<invalid tensor>";
  std::string out = absl::StrCat(DTypeName(dtype_), shape_.ToString(), " {");
  VisitDType(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const T* values = data<T>();
    const int64_t n = num_elements();
    for (int64_t i = 0; i < n && i < max_elements; ++i) {
      if (i > 0) out += ", ";
      out += ElementString(values[i]);
    }
    if (n > max_elements) out += ", ...";
  });
  out += "}";
  return out;
}

bool TensorsEqual(const Tensor& a, const Tensor& b) { return TensorsAllClose(a, b, 0, 0); }

bool TensorsIdentical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.raw_data() == b.raw_data()) return true;
  if (a.dtype() == DType::kString) {
    return std::equal(a.data<std::string>(), a.data<std::string>() + a.num_elements(),
                      b.data<std::string>());
  }
  return std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

bool TensorsAllClose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  bool equal = true;
  VisitDType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    for (int64_t i = 0; i < a.num_elements() && equal; ++i) {
      if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool> ||
                    std::is_integral_v<T>) {
        equal = x[i] == y[i];
      } else {
        const double u = AsDouble(x[i]), v = AsDouble(y[i]);
        if (std::isnan(u) || std::isnan(v)) {
          equal = std::isnan(u) && std::isnan(v);
        } else if (std::isinf(u) || std::isinf(v)) {
          equal = u == v;
        } else {
          equal = std::fabs(u - v) <= atol + rtol * std::fabs(v);
        }
      }
    }
  });
  return equal;
}

}  // namespace kiln
