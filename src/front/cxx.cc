// cxx: C++ operator new and delete in every form, compiled into the library so that any C++
// program gets magpie without rebuilding. The throwing forms call the installed new_handler
// until it succeeds or there is none, then throw std::bad_alloc; the nothrow forms return
// nullptr instead. The plain forms inline malloc's and free's fast paths (fastpath.h); a sized
// delete takes the class from its size where that is safe (fast_free_sized_try). Aligned forms
// go to the slow paths, and every size and alignment reaches them, where debug mode checks it.
//
// No libstdc++ dependency: a C program that preloads magpie should not pay for loading the C++
// runtime, its memory and its start-up allocations. Every runtime symbol
// used here is a weak reference: in a C++ program libstdc++ is loaded and they resolve, so the
// standard behaviour holds; in a C program nothing calls operator new. std::bad_alloc is thrown
// through the Itanium C++ ABI (__cxa_allocate_exception, __cxa_throw, bad_alloc's vtable and
// typeinfo), which is how a throw expression compiles.
#include "debug.h"
#include "export.h"
#include "fastpath.h"
#include "magpie.h"
#include "report.h"

#include <new>

extern "C" {
void *__cxa_allocate_exception(std::size_t size) noexcept __attribute__((weak));
[[noreturn]] void __cxa_throw(void *obj, void *type, void (*dtor)(void *)) __attribute__((weak));
void *__cxa_begin_catch(void *exception) noexcept __attribute__((weak));
void __cxa_end_catch() __attribute__((weak));
extern char bad_alloc_vtable[] __asm__("_ZTVSt9bad_alloc") __attribute__((weak));
extern char bad_alloc_typeinfo[] __asm__("_ZTISt9bad_alloc") __attribute__((weak));
void bad_alloc_dtor(void *obj) __asm__("_ZNSt9bad_allocD1Ev") __attribute__((weak));
}
namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
}
// The catch in retry_nothrow makes the compiler reference the C++ personality routine; it only
// runs while an exception unwinds through that frame, which needs the C++ runtime loaded.
__asm__(".weak __gxx_personality_v0");

namespace {

[[noreturn]] void throw_bad_alloc(std::size_t size) {
  if (!__cxa_allocate_exception || !__cxa_throw || !bad_alloc_vtable || !bad_alloc_typeinfo)
    report_fatal("operator new: out of memory, and no C++ runtime to throw std::bad_alloc", NULL,
                 size);
  void *e = __cxa_allocate_exception(sizeof(void *));
  *static_cast<void **>(e) = bad_alloc_vtable + 2 * sizeof(void *); /* the object's vptr */
  __cxa_throw(e, bad_alloc_typeinfo, bad_alloc_dtor);
}

void *retry(std::size_t size, std::size_t align) {
  for (;;) {
    std::new_handler handler = std::get_new_handler ? std::get_new_handler() : nullptr;
    if (!handler) throw_bad_alloc(size);
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

// The slow paths (align 0: the default), out of line so that the inlined fast paths stay short.
__attribute__((noinline)) void *alloc_slow(std::size_t size, std::size_t align) {
  void *p = malloc_slow_kind(size, align, DEBUG_NEW);
  return p ? p : retry(size, align);
}

__attribute__((noinline)) void *alloc_nothrow_slow(std::size_t size, std::size_t align) noexcept {
  void *p = malloc_slow_kind(size, align, DEBUG_NEW);
  return p ? p : retry_nothrow(size, align);
}

MP_INLINE void *alloc(std::size_t size) {
  void *p = fast_malloc_try(size);
  return MP_LIKELY(p != nullptr) ? p : alloc_slow(size, 0);
}

inline void *alloc_aligned(std::size_t size, std::align_val_t align) {
  return alloc_slow(size, static_cast<std::size_t>(align));
}

MP_INLINE void *alloc_nothrow(std::size_t size) noexcept {
  void *p = fast_malloc_try(size);
  return MP_LIKELY(p != nullptr) ? p : alloc_nothrow_slow(size, 0);
}

inline void *alloc_aligned_nothrow(std::size_t size, std::align_val_t align) noexcept {
  return alloc_nothrow_slow(size, static_cast<std::size_t>(align));
}

MP_INLINE void release(void *p) noexcept {
  if (!MP_LIKELY(fast_free_try(p))) free_slow_kind(p, 0, 0, DEBUG_NEW);
}

MP_INLINE void release_sized(void *p, std::size_t size) noexcept {
  if (!MP_LIKELY(fast_free_sized_try(p, size))) free_slow_kind(p, size, 0, DEBUG_NEW);
}

// Aligned blocks may come from a class above their size's (api.c, class_of): the page map's way.
inline void release_aligned(void *p, std::size_t size, std::size_t align) noexcept {
  if (!fast_free_try(p)) free_slow_kind(p, size, align, DEBUG_NEW);
}

} // namespace

MAGPIE_EXPORT MP_ENTRY void *operator new(std::size_t n) {
  return alloc(n);
}
MAGPIE_EXPORT MP_ENTRY void *operator new[](std::size_t n) {
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

MAGPIE_EXPORT MP_ENTRY void operator delete(void *p) noexcept {
  release(p);
}
MAGPIE_EXPORT MP_ENTRY void operator delete[](void *p) noexcept {
  release(p);
}
MAGPIE_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept {
  release(p);
}
MAGPIE_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept {
  release(p);
}
MAGPIE_EXPORT MP_ENTRY void operator delete(void *p, std::size_t n) noexcept {
  release_sized(p, n);
}
MAGPIE_EXPORT MP_ENTRY void operator delete[](void *p, std::size_t n) noexcept {
  release_sized(p, n);
}
MAGPIE_EXPORT void operator delete(void *p, std::align_val_t a) noexcept {
  release_aligned(p, 0, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete[](void *p, std::align_val_t a) noexcept {
  release_aligned(p, 0, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete(void *p, std::size_t n, std::align_val_t a) noexcept {
  release_aligned(p, n, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete[](void *p, std::size_t n, std::align_val_t a) noexcept {
  release_aligned(p, n, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete(void *p, std::align_val_t a, const std::nothrow_t &) noexcept {
  release_aligned(p, 0, static_cast<std::size_t>(a));
}
MAGPIE_EXPORT void operator delete[](void *p, std::align_val_t a, const std::nothrow_t &) noexcept {
  release_aligned(p, 0, static_cast<std::size_t>(a));
}
