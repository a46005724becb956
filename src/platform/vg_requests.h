/*
 * vg_requests: valgrind's client requests, the few magpie makes, as inline functions that do
 * nothing when the build found no <valgrind/memcheck.h> (Debian's package valgrind ships it).
 *
 * A client request is a short sequence of instructions that does nothing on the CPU and that
 * valgrind recognises; outside valgrind each costs a handful of instructions, and magpie makes
 * them only in memcheck mode (front/memcheck_mode.c), never on the fast path.
 * vg_memcheck_running tells memcheck apart from valgrind's other tools (callgrind, helgrind...):
 * only memcheck answers VALGRIND_GET_VBITS (1: done; other tools leave the default, 0).
 */
#ifndef MAGPIE_VG_REQUESTS_H
#define MAGPIE_VG_REQUESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#define MAGPIE_HAVE_VALGRIND 1
#endif
#endif

#ifdef MAGPIE_HAVE_VALGRIND
#include <valgrind/memcheck.h>

/* Under any of valgrind's tools (which may not know a newer system call: os_mem.c). */
static inline bool vg_running(void) {
  return RUNNING_ON_VALGRIND;
}

static inline bool vg_memcheck_running(void) {
  char byte = 0, vbits = 0;
  return vg_running() && VALGRIND_GET_VBITS(&byte, &vbits, 1) == 1;
}
/* A block handed out: addressable, defined if zeroed, else undefined. */
static inline void vg_block_alloc(void *p, size_t size, bool zeroed) {
  VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, zeroed);
}
/* A block given back: memcheck reports it if it knows no such block, then makes it
   inaccessible. */
static inline void vg_block_free(void *p) {
  VALGRIND_FREELIKE_BLOCK(p, 0);
}
static inline void vg_block_resize(void *p, size_t old_size, size_t new_size) {
  VALGRIND_RESIZEINPLACE_BLOCK(p, old_size, new_size, 0);
}
static inline void vg_noaccess(void *p, size_t size) {
  (void)VALGRIND_MAKE_MEM_NOACCESS(p, size);
}
static inline void vg_defined(void *p, size_t size) {
  (void)VALGRIND_MAKE_MEM_DEFINED(p, size);
}
/* The first address of [p, p + size) memcheck does not let the program touch, or NULL; no
   error is reported inside vg_errors_off. */
static inline void *vg_first_noaccess(const void *p, size_t size) {
  return (void *)(uintptr_t)VALGRIND_CHECK_MEM_IS_ADDRESSABLE(p, size);
}
/* Memory the allocator keeps to itself: inaccessible, so memcheck's leak search does not find
   the block addresses it holds, and accesses to it are not reported. vg_unhide undoes the
   latter before the range is unmapped. */
static inline void vg_hide(void *p, size_t size) {
  (void)VALGRIND_MAKE_MEM_NOACCESS(p, size);
  (void)VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(p, size);
}
static inline void vg_unhide(void *p, size_t size) {
  (void)VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(p, size);
}
/* The calling thread's errors are not reported between these two (they nest). */
static inline void vg_errors_off(void) {
  VALGRIND_DISABLE_ERROR_REPORTING;
}
static inline void vg_errors_on(void) {
  VALGRIND_ENABLE_ERROR_REPORTING;
}
#else
static inline bool vg_running(void) {
  return false;
}
static inline bool vg_memcheck_running(void) {
  return false;
}
static inline void vg_block_alloc(void *p, size_t size, bool zeroed) {
  (void)p, (void)size, (void)zeroed;
}
static inline void vg_block_free(void *p) {
  (void)p;
}
static inline void vg_block_resize(void *p, size_t old_size, size_t new_size) {
  (void)p, (void)old_size, (void)new_size;
}
static inline void vg_noaccess(void *p, size_t size) {
  (void)p, (void)size;
}
static inline void vg_defined(void *p, size_t size) {
  (void)p, (void)size;
}
static inline void *vg_first_noaccess(const void *p, size_t size) {
  (void)p, (void)size;
  return NULL;
}
static inline void vg_hide(void *p, size_t size) {
  (void)p, (void)size;
}
static inline void vg_unhide(void *p, size_t size) {
  (void)p, (void)size;
}
static inline void vg_errors_off(void) {}
static inline void vg_errors_on(void) {}
#endif

#endif
