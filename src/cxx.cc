// cxx: C++ operator new and delete in every form, compiled into the library so that any C++
// program gets magpie without rebuilding. The throwing forms call the installed new_handler
// until it succeeds or there is none, then throw std::bad_alloc; the nothrow forms return
// nullptr instead. Sized and aligned deletes free like free(): magpie knows every block's size.
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
    void *p = align ? magpie_aligned_alloc(align, size) : fast_malloc(size);
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
  void *p = fast_malloc(size);
  return p ? p : retry(size, 0);
}

inline void *alloc_aligned(std::size_t size, std::align_val_t align) {
  void *p = magpie_aligned_alloc(static_cast<std::size_t>(align), size);
  return p ? p : retry(size, static_cast<std::size_t>(align));
}

inline void *alloc_nothrow(std::size_t size) noexcept {
  void *p = fast_malloc(size);
  return p ? p : retry_nothrow(size, 0);
}

inline void *alloc_aligned_nothrow(std::size_t size, std::align_val_t align) noexcept {
  void *p = magpie_aligned_alloc(static_cast<std::size_t>(align), size);
  return p ? p : retry_nothrow(size, static_cast<std::size_t>(align));
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
  fast_free(p);
}
MAGPIE_EXPORT void operator delete[](void *p) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete(void *p, std::size_t) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete[](void *p, std::size_t) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete(void *p, std::align_val_t) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete[](void *p, std::align_val_t) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete(void *p, std::size_t, std::align_val_t) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete[](void *p, std::size_t, std::align_val_t) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  fast_free(p);
}
MAGPIE_EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  fast_free(p);
}
