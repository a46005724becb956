/*
 * san_hooks: the interface of a sanitizer runtime (AddressSanitizer, ThreadSanitizer) that the
 * program was built with, found through weak references: NULL when there is none.
 *
 * In a sanitized program the sanitizer's malloc serves malloc (docs/sanitizers.md), but
 * magpie's object caches stay magpie's, and the sanitizer knows nothing of them: ASan would
 * miss an overrun or a use after free of an object, and TSan would report the writes of two
 * threads that got the same object in turn as a race, not seeing magpie's locks between them.
 * So where a runtime is found (san_present), magpie turns its magazines off (front/init.c);
 * ASan: objects are poisoned while magpie holds them, from the destructor's return until the
 * next constructor's call (slab.c); TSan: magpie's locks (lock.h) are shown to it as a release
 * and an acquire, which orders whatever they order: objects going back to a slab and out again,
 * metadata records reused (cleared with libc's memset, which TSan intercepts).
 * A build of magpie itself instrumented by a sanitizer (its own tests) leaves all this out:
 * there the sanitizer checks magpie, not the program's objects.
 */
#ifndef MAGPIE_SAN_HOOKS_H
#define MAGPIE_SAN_HOOKS_H

#include <stdbool.h>
#include <stddef.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) ||                               \
    __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SAN_MAGPIE_INSTRUMENTED 1
#endif

#ifndef SAN_MAGPIE_INSTRUMENTED
#ifdef __cplusplus
extern "C" {
#endif
void __asan_poison_memory_region(void const volatile *addr, size_t size) __attribute__((weak));
void __asan_unpoison_memory_region(void const volatile *addr, size_t size) __attribute__((weak));
void __tsan_acquire(void *addr) __attribute__((weak));
void __tsan_release(void *addr) __attribute__((weak));
#ifdef __cplusplus
}
#endif

static inline bool san_present(void) {
  return __asan_poison_memory_region || __tsan_acquire;
}
static inline bool san_poisons(void) { /* ASan is there */
  return __asan_poison_memory_region != NULL;
}
/* ASan: the object's bytes may not be touched (held by magpie), or may again. */
static inline void san_poison(void *p, size_t size) {
  if (__asan_poison_memory_region) __asan_poison_memory_region(p, size);
}
static inline void san_unpoison(void *p, size_t size) {
  if (__asan_unpoison_memory_region) __asan_unpoison_memory_region(p, size);
}
/* TSan: what a thread did before releasing lock l happens before what the next holder does. */
static inline void san_lock_taken(void *l) {
  if (__tsan_acquire) __tsan_acquire(l);
}
static inline void san_lock_releasing(void *l) {
  if (__tsan_release) __tsan_release(l);
}
#else
static inline bool san_present(void) {
  return false;
}
static inline bool san_poisons(void) {
  return false;
}
static inline void san_poison(void *p, size_t size) {
  (void)p, (void)size;
}
static inline void san_unpoison(void *p, size_t size) {
  (void)p, (void)size;
}
static inline void san_lock_taken(void *l) {
  (void)l;
}
static inline void san_lock_releasing(void *l) {
  (void)l;
}
#endif

#endif
