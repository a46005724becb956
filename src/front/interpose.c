/*
 * interpose: glibc's allocation API under glibc's names, so that linking -lmagpie or
 * LD_PRELOAD=libmagpie.so replaces the system allocator. Only forwarding lives here; the
 * semantics are in api.c. The __libc_* aliases are what glibc itself and some programs call.
 * This file is left out of the sanitizer builds, whose runtimes own these names.
 */
#include "api.h"
#include "export.h"
#include "fastpath.h"

#include <limits.h>
#include <malloc.h>
#include <stdlib.h>

#define ALIAS(name) __attribute__((alias(#name), copy(name), visibility("default")))

MAGPIE_EXPORT MP_ENTRY void *malloc(size_t size) {
  return fast_malloc(size);
}
MAGPIE_EXPORT MP_ENTRY void free(void *p) {
  fast_free(p);
}
MAGPIE_EXPORT void *calloc(size_t n, size_t size) {
  return magpie_calloc(n, size);
}
MAGPIE_EXPORT void *realloc(void *p, size_t size) {
  return magpie_realloc(p, size);
}
MAGPIE_EXPORT void *reallocarray(void *p, size_t n, size_t size) {
  return api_reallocarray(p, n, size);
}
MAGPIE_EXPORT int posix_memalign(void **out, size_t align, size_t size) {
  return magpie_posix_memalign(out, align, size);
}
MAGPIE_EXPORT void *aligned_alloc(size_t align, size_t size) {
  return magpie_aligned_alloc(align, size);
}
MAGPIE_EXPORT void *memalign(size_t align, size_t size) {
  return magpie_aligned_alloc(align, size);
}
MAGPIE_EXPORT void *valloc(size_t size) {
  return api_valloc(size);
}
MAGPIE_EXPORT void *pvalloc(size_t size) {
  return api_pvalloc(size);
}
MAGPIE_EXPORT size_t malloc_usable_size(void *p) {
  return magpie_usable_size(p);
}
MAGPIE_EXPORT void free_sized(void *p, size_t size) {
  api_free_sized(p, size, 0);
}
MAGPIE_EXPORT void free_aligned_sized(void *p, size_t align, size_t size) {
  api_free_sized(p, size, align);
}
MAGPIE_EXPORT int malloc_trim(size_t pad) {
  return api_trim(pad);
}
MAGPIE_EXPORT struct mallinfo2 mallinfo2(void) {
  return api_mallinfo2();
}
MAGPIE_EXPORT void malloc_stats(void) {
  api_malloc_stats();
}
MAGPIE_EXPORT int malloc_info(int options, FILE *fp) {
  return api_malloc_info(options, fp);
}
/* The largest fastbin limit glibc accepts (80 * sizeof(size_t) / 4 bytes). */
#define MALLOPT_MXFAST_MAX (80 * sizeof(size_t) / 4)

/* magpie tunes itself (MAGPIE_OPTIONS is its interface) and ignores the setting, but answers
   as glibc does: 1, except for a fastbin limit out of glibc's range. */
MAGPIE_EXPORT int mallopt(int param, int value) {
  if (param == M_MXFAST && (value < 0 || (size_t)value > MALLOPT_MXFAST_MAX)) return 0;
  return 1;
}

static int clamp_int(size_t v) {
  return v > INT_MAX ? INT_MAX : (int)v;
}

MAGPIE_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = api_mallinfo2();
  struct mallinfo mi = {clamp_int(m2.arena),   clamp_int(m2.ordblks),  clamp_int(m2.smblks),
                        clamp_int(m2.hblks),   clamp_int(m2.hblkhd),   clamp_int(m2.usmblks),
                        clamp_int(m2.fsmblks), clamp_int(m2.uordblks), clamp_int(m2.fordblks),
                        clamp_int(m2.keepcost)};
  return mi;
}

void *__libc_malloc(size_t size) ALIAS(malloc);
void __libc_free(void *p) ALIAS(free);
void *__libc_calloc(size_t n, size_t size) ALIAS(calloc);
void *__libc_realloc(void *p, size_t size) ALIAS(realloc);
void *__libc_memalign(size_t align, size_t size) ALIAS(memalign);
void *__libc_valloc(size_t size) ALIAS(valloc);
void *__libc_pvalloc(size_t size) ALIAS(pvalloc);
