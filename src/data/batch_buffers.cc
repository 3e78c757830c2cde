// BatchBufferPool (batch_buffers.h).
#include "data/batch_buffers.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::data {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kRecycle = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kRecycle = false;
#else
constexpr bool kRecycle = true;
#endif
#else
constexpr bool kRecycle = true;
#endif

// `length` bytes (a multiple of 2 MiB) at a 2 MiB boundary, so that every page of the block
// can be a huge page; nullptr when the system has no memory for it.
void* MapHugeAligned(size_t length) {
  const size_t padded = length + kHugePage;
  void* raw = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + padded, used_end = aligned + length;
  if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* block = reinterpret_cast<void*>(aligned);
  // Advice only: where transparent huge pages are off ("never") the block is served in 4 KiB
  // pages as any other memory, and is still reused.
  ::madvise(block, length, MADV_HUGEPAGE);
  return block;
}

}  // namespace

std::shared_ptr<BatchBufferPool> BatchBufferPool::Create(size_t max_free) {
  return std::shared_ptr<BatchBufferPool>(new BatchBufferPool(kRecycle ? max_free : 0));
}

BatchBufferPool::~BatchBufferPool() {
  for (const Block& b : free_) ::munmap(b.data, b.length);
}

absl::StatusOr<Tensor> BatchBufferPool::Allocate(DType dtype, const Shape& shape) {
  absl::StatusOr<size_t> bytes = CheckedByteSize(dtype, shape);
  if (!bytes.ok()) return bytes.status();
  if (dtype == DType::kString || *bytes < kMinBytes) return Tensor::Allocate(dtype, shape);
  if (*bytes > SIZE_MAX - 2 * kHugePage) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", *bytes, " bytes for ",
                                                     DTypeName(dtype), shape.ToString()));
  }
  const size_t length = (*bytes + kHugePage - 1) / kHugePage * kHugePage;
  absl::StatusOr<Block> block = Take(length);
  if (!block.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", *bytes, " bytes for ",
                                                     DTypeName(dtype), shape.ToString(), ": ",
                                                     block.status().message()));
  }
  // The release hook keeps the pool alive until the last batch that came from it is gone.
  std::shared_ptr<Buffer> buffer =
      Buffer::Wrap(block->data, *bytes, [pool = shared_from_this(), b = *block] { pool->Give(b); });
  return Tensor(dtype, shape, std::move(buffer));
}

absl::StatusOr<BatchBufferPool::Block> BatchBufferPool::Take(size_t length) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The most recently released block of that size: the one most likely still in cache.
    for (size_t i = free_.size(); i-- > 0;) {
      if (free_[i].length != length) continue;
      Block block = free_[i];
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      return block;
    }
  }
  void* data = MapHugeAligned(length);  // outside the lock: mmap may take a while
  if (data == nullptr) return absl::ResourceExhaustedError(std::strerror(errno));
  std::lock_guard<std::mutex> lock(mu_);
  ++mapped_;
  return Block{data, length};
}

void BatchBufferPool::Give(Block block) {
  Block unmap = block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (max_free_ > 0) {
      // Keep the newest (warmest) blocks; past the cap the oldest goes back to the system.
      unmap = {nullptr, 0};
      if (free_.size() >= max_free_) {
        unmap = free_.front();
        free_.erase(free_.begin());
      }
      free_.push_back(block);
    }
  }
  if (unmap.data != nullptr) ::munmap(unmap.data, unmap.length);  // outside the lock
}

int64_t BatchBufferPool::blocks_mapped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_;
}

int64_t BatchBufferPool::free_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_.size());
}

}  // namespace kiln::data
