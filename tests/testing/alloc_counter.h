// Counts heap allocations in a test binary by replacing the global operator new and the C
// allocation functions (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign:
// oneDNN allocates its objects with posix_memalign, not operator new, and so does Kiln's
// Buffer), and tells apart those made from inside oneDNN (by the library of the caller).
// Include it in exactly one source file of a test binary: it defines the replacements, which
// forward to glibc's own functions. Such a binary is kept out of the sanitizer builds, which
// replace these functions themselves.
//
//   kiln::alloc_testing::AllocationCount count;  // counts from here...
//   ... warm runs ...
//   count.Stop();                          // ...to here
//   EXPECT_EQ(count.total() - count.from_onednn(), 0);
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
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

// Set while an allocation is being counted: dladdr may allocate, which is not the caller's.
inline thread_local bool in_count = false;

inline void Count(void* caller) {
  if (!counting.load(std::memory_order_relaxed) || in_count) return;
  in_count = true;
  allocations.fetch_add(1);
  if (CalledFromOneDnn(caller)) onednn_allocations.fetch_add(1);
  in_count = false;
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

// glibc's allocator under its exported internal names, which the replacements forward to.
extern "C" {
void* __libc_malloc(size_t size);
void __libc_free(void* p);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}

extern "C" void* malloc(size_t size) noexcept {
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  return __libc_malloc(size);
}
extern "C" void free(void* p) noexcept { __libc_free(p); }
extern "C" void* calloc(size_t count, size_t size) noexcept {
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  return __libc_calloc(count, size);
}
extern "C" void* realloc(void* p, size_t size) noexcept {
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  return __libc_realloc(p, size);
}
extern "C" void* memalign(size_t alignment, size_t size) noexcept {
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  return __libc_memalign(alignment, size);
}
extern "C" void* aligned_alloc(size_t alignment, size_t size) noexcept {
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  return __libc_memalign(alignment, size);
}
extern "C" int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

void* operator new(size_t size) {
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  void* p = __libc_malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t size) {
  kiln::alloc_testing::alloc_internal::Count(__builtin_return_address(0));
  void* p = __libc_malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t) noexcept { __libc_free(p); }

#pragma GCC diagnostic pop
