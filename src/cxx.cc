// cxx: C++ operator new and delete in every form, compiled into the library so that any C++
// program gets magpie without rebuilding. The throwing forms call the installed new_handler
// until it succeeds or there is none, then throw std::bad_alloc; the nothrow forms return
// nullptr instead. Sized and aligned deletes free like free() (magpie knows every block's size);
// their size and alignment reach the slow path only, where debug mode checks them.
#include "debug.h"
#include "export.h"
#include "fastpath.h"
#include "magpie.h"

#include <new>

namespace {

void *retry(std::size_t size, std::size_t align) {
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
    void *p = malloc_slow_kind(size, align, DEBUG_NEW);
    if (p) return p;
  }
}

void *retry_nothrow(std::size_t size, std::size_t align) noexcept {
  try {
    return retry(size, align);
  } catch (...) {
    return nullptr;
  }
}

inline void *alloc(std::size_t size) {
  void *p = fast_malloc_try(size);
  if (p || (p = malloc_slow_kind(size, 0, DEBUG_NEW))) return p;
  return retry(size, 0);
}

inline void *alloc_aligned(std::size_t size, std::align_val_t align) {
  std::size_t a = static_cast<std::size_t>(align);
  void *p = malloc_slow_kind(size, a, DEBUG_NEW);
  return p ? p : retry(size, a);
}

inline void *alloc_nothrow(std::size_t size) noexcept {
  void *p = fast_malloc_try(size);
  if (p || (p = malloc_slow_kind(size, 0, DEBUG_NEW))) return p;
  return retry_nothrow(size, 0);
}

inline void *alloc_aligned_nothrow(std::size_t size, std::align_val_t align) noexcept {
  std::size_t a = static_cast<std::size_t>(align);
  void *p = malloc_slow_kind(size, a, DEBUG_NEW);
  return p ? p : retry_nothrow(size, a);
}

inline void release(void *p, std::size_t size, std::size_t align) noexcept {
  if (!fast_free_try(p)) free_slow_kind(p, size, align, DEBUG_NEW);
}

} // namespace

MAGPIE_EXPORT void *operator new(std::size_t n) {
  return alloc(n);
}
MAGPIE_EXPORT void *operator new[](std::size_t n) {
  return alloc(n);
}
MAGPIE_EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept {
  return alloc_nothrow(n);
}
MAGPIE_EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept {
  return alloc_nothrow(n);
}
MAGPIE_EXPORT void *operator new(std::size_t n, std::align_val_t a) {
  return alloc_aligned(n, a);
}
MAGPIE_EXPORT void *operator new[](std::size_t n, std::align_val_t a) {
  return alloc_aligned(n, a);
}
MAGPIE_EXPORT void *operator new(std::size_t n, std::align_val_t a,
                                 const std::nothrow_t &) noexcept {
  return alloc_aligned_nothrow(n, a);
}
MAGPIE_EXPORT void *operator new[](std::size_t n, std::align_val_t a,
                                   const std::nothrow_t &) noexcept {
  return alloc_aligned_nothrow(n, a);
}

MAGPIE_EXPORT void operator delete(void *p) noexcept {
  release(p, 0, 0);
}
MAGPIE_EXPORT void operator delete[](void *p) noexcept {
  release(p, 0, 0);
}
MAGPIE_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept {
  release(p, 0, 0);
}
MAGPIE_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept {
  release(p, 0, 0);
}
MAGPIE_EXPORT void operator delete(void *p, std::size_t n) noexcept {
  release(p, n, 0);
}
MAGPIE_EXPORT void operator delete[](void *p, std::size_t n) noexcept {
  release(p, n, 0);
}
MAGPIE_EXPORT void operator delete(void *p, std::align_val_t a) noexcept {
  release(p, 0, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete[](void *p, std::align_val_t a) noexcept {
  release(p, 0, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete(void *p, std::size_t n, std::align_val_t a) noexcept {
  release(p, n, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete[](void *p, std::size_t n, std::align_val_t a) noexcept {
  release(p, n, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete(void *p, std::align_val_t a, const std::nothrow_t &) noexcept {
  release(p, 0, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete[](void *p, std::align_val_t a, const std::nothrow_t &) noexcept {
  release(p, 0, static_cast<std::size_t>(a));
}
