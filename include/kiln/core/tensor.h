// Tensor: a dtype, a shape and a view into a reference-counted, 64-byte aligned buffer.
// Copies of a Tensor share the buffer (cheap); Slice() along the first dimension and
// Reshape() are zero-copy views; Clone() copies the bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/core/dtype.h"

namespace kiln {

inline constexpr size_t kTensorAlignment = 64;

// Dimensions of a tensor. Rank 0 is a scalar with one element.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(absl::Span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}
  explicit Shape(const std::vector<int64_t>& dims) : dims_(dims.begin(), dims.end()) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  int64_t operator[](int i) const { return dims_[i]; }
  void set_dim(int i, int64_t value) { dims_[i] = value; }
  void push_back(int64_t d) { dims_.push_back(d); }
  void insert(int pos, int64_t d) { dims_.insert(dims_.begin() + pos, d); }
  void erase(int pos) { dims_.erase(dims_.begin() + pos); }
  absl::Span<const int64_t> dims() const { return dims_; }
  std::vector<int64_t> ToVector() const { return {dims_.begin(), dims_.end()}; }
  int64_t num_elements() const;  // product of dims; 1 for a scalar
  std::string ToString() const;  // "[2, 3]"; "[]" for a scalar
  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }
  template <typename H>
  friend H AbslHashValue(H h, const Shape& s) {
    return H::combine(std::move(h), s.dims_);
  }

 private:
  absl::InlinedVector<int64_t, 6> dims_;
};

// Owns (or borrows) a block of memory. Allocate() gives 64-byte aligned memory; string
// buffers hold constructed std::string objects that are destroyed with the buffer.
// Thread safety: the bytes are not guarded; a Buffer shared by several tensors (copies, slices,
// a plan's constants) may be read from any number of threads, and written only while no other
// thread reads or writes it. Its lifetime is the shared_ptr's: safe from any thread.
class Buffer {
 public:
  // Uninitialized bytes (zeroed when zero == true).
  static std::shared_ptr<Buffer> Allocate(size_t bytes, bool zero = false);
  // `count` default-constructed std::string objects.
  static std::shared_ptr<Buffer> AllocateStrings(size_t count);
  // Memory owned elsewhere (an arena, a mapped file); `release` runs when the last
  // reference goes away (may be empty).
  static std::shared_ptr<Buffer> Wrap(void* data, size_t bytes, std::function<void()> release);

  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Buffer() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t string_count_ = 0;  // > 0: data_ holds that many std::string objects
  bool owned_ = false;
  std::function<void()> release_;
};

// Thread safety: a Tensor is a value (dtype, shape, shared_ptr<Buffer>, offset): copying and
// destroying copies on different threads is safe. Copies share their buffer, so the rule of
// Buffer applies to the elements: a kernel writes only tensors no other thread can see (plan
// outputs, arena slots it owns); constants and inputs handed to several runs are read-only.
// Clone() before writing to a tensor that might be shared.
class Tensor {
 public:
  Tensor() = default;  // an invalid (empty) tensor: dtype kInvalid
  // Allocates storage: numbers uninitialized, strings empty. Throws std::bad_alloc when the
  // memory cannot be had or the shape's byte size overflows; code that sizes a tensor from
  // untrusted values uses Allocate instead.
  Tensor(DType dtype, Shape shape);
  // The same, as a value: InvalidArgument for a shape whose size overflows,
  // ResourceExhausted (naming the shape and bytes) when the allocation fails.
  static absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape);
  // A view of `buffer` starting at `byte_offset`; the buffer must be large enough.
  Tensor(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer, size_t byte_offset = 0);

  static Tensor Zeros(DType dtype, Shape shape);
  template <typename T>
  static Tensor Scalar(T value) {
    Tensor t(DTypeOf<T>::value, Shape{});
    *t.data<T>() = std::move(value);
    return t;
  }
  // A rank-1 tensor of `values`, or of `shape` when given (its element count must match).
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values);
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, Shape shape);

  bool valid() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }

  void* raw_data() const {
    return buffer_ ? static_cast<char*>(buffer_->data()) + offset_ : nullptr;
  }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  absl::Span<T> span() const {
    return absl::Span<T>(data<T>(), static_cast<size_t>(num_elements()));
  }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  size_t byte_offset() const { return offset_; }

  // Rows [begin, end) of the first dimension, sharing the buffer. Requires rank >= 1.
  Tensor Slice(int64_t begin, int64_t end) const;
  // Row `index` of the first dimension with that dimension removed, sharing the buffer.
  Tensor SubTensor(int64_t index) const;
  // Same elements with another shape (same element count), sharing the buffer.
  absl::StatusOr<Tensor> Reshape(Shape shape) const;
  // A deep copy in a new buffer.
  Tensor Clone() const;
  // Copies elements from `other` (same dtype and element count) into this tensor's memory.
  void CopyFrom(const Tensor& other);

  // "float32[2, 3] {1, 2, 3, 4, 5, 6}" with at most `max_elements` values shown.
  std::string DebugString(int max_elements = 16) const;

 private:
  DType dtype_ = DType::kInvalid;
  Shape shape_;
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
};

// Element count and byte size of a shape that may come from untrusted input (a request, a
// file, values a kernel computed): the one place such counts are computed with overflow
// checks. InvalidArgument, naming the shape, when a dimension is negative or the count or
// its bytes do not fit in 63 bits.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims);
absl::StatusOr<size_t> CheckedByteSize(DType dtype, const Shape& shape);

// True when both tensors have the same dtype, shape and elements (NaNs compare equal).
bool TensorsEqual(const Tensor& a, const Tensor& b);
// True when both tensors have the same dtype, shape and bytes (strings: the same strings): what
// a computation cannot tell apart, so -0.0 and 0.0, or two NaN payloads, differ. The same
// buffer is not read.
bool TensorsIdentical(const Tensor& a, const Tensor& b);
// Element-wise |a - b| <= atol + rtol * |b| for floating-point tensors, equality otherwise.
bool TensorsAllClose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values) {
  return FromVector(values, Shape{static_cast<int64_t>(values.size())});
}

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, Shape shape) {
  Tensor t(DTypeOf<T>::value, std::move(shape));
  T* out = t.data<T>();
  const int64_t n = std::min<int64_t>(t.num_elements(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < n; ++i) out[i] = values[i];
  return t;
}

// std::vector<bool> is bit-packed; bool tensors are built from a vector of uint8_t-like values.
template <>
Tensor Tensor::FromVector<bool>(const std::vector<bool>& values, Shape shape);

}  // namespace kiln
