// Counts heap allocations in a test binary by replacing the global operator new, and tells
// apart those made from inside oneDNN (by the library of the caller). Include it in exactly one
// source file of a test binary: it defines the replacement operators. Such a binary is kept out
// of the sanitizer builds, which replace operator new themselves.
//
//   kiln::alloc_testing::AllocationCount count;  // counts from here...
//   ... warm runs ...
//   count.Stop();                          // ...to here
//   EXPECT_EQ(count.total() - count.from_onednn(), 0);
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace kiln::alloc_testing {
namespace alloc_internal {

inline std::atomic<bool> counting{false};
inline std::atomic<int64_t> allocations{0};
inline std::atomic<int64_t> onednn_allocations{0};

inline bool CalledFromOneDnn(void* caller) {
  Dl_info info;
  return dladdr(caller, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libdnnl") != nullptr;
}

}  // namespace alloc_internal

// Counts the allocations between construction and Stop() (or destruction). One at a time.
class AllocationCount {
 public:
  AllocationCount() {
    alloc_internal::allocations = 0;
    alloc_internal::onednn_allocations = 0;
    alloc_internal::counting = true;
  }
  ~AllocationCount() { Stop(); }
  AllocationCount(const AllocationCount&) = delete;
  AllocationCount& operator=(const AllocationCount&) = delete;

  void Stop() { alloc_internal::counting = false; }
  int64_t total() const { return alloc_internal::allocations.load(); }
  int64_t from_onednn() const { return alloc_internal::onednn_allocations.load(); }
};

}  // namespace kiln::alloc_testing

// The replacements pair malloc with free on purpose; __builtin_return_address(0) is the caller
// of operator new, which is all the attribution needs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#pragma GCC diagnostic ignored "-Wframe-address"

void* operator new(size_t size) {
  namespace a = kiln::alloc_testing::alloc_internal;
  if (a::counting.load(std::memory_order_relaxed)) {
    a::allocations.fetch_add(1);
    if (a::CalledFromOneDnn(__builtin_return_address(0))) a::onednn_allocations.fetch_add(1);
  }
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

#pragma GCC diagnostic pop
