/*
 * os_track: the record of which mappings are magpie's.
 *
 * Theory
 *   1. Once os_track_start ran (debug mode's leak report asks, at bring-up), every os_map,
 *      os_map_aligned, os_remap and os_unmap records its range in a table of its own mapping, a
 *      slot claimed by a compare-and-swap (no lock: a fork or a signal never finds it held).
 *      The leak scan then reads the program's anonymous memory and leaves magpie's out,
 *      however the kernel merged the two into its mappings. A table that overflows says so,
 *      and is not trusted.
 */
#define _GNU_SOURCE
#include "os.h"
#include "os_impl.h"

#include <sys/mman.h>

#define OS_TRACK_SLOTS ((size_t)1 << 16) /* a power of two */

static os_range_t *os_track;   /* NULL until os_track_start */
static bool os_track_overflow; /* a mapping found no slot: the table is incomplete */

static size_t os_track_slot(uintptr_t lo) {
  return (size_t)(((lo >> OS_PAGE_SHIFT) * 0x9e3779b97f4a7c15ull) >> 48) & (OS_TRACK_SLOTS - 1);
}

void os_track_add(uintptr_t lo, uintptr_t hi) {
  os_range_t *t = __atomic_load_n(&os_track, __ATOMIC_ACQUIRE);
  if (!t || hi <= lo) return;
  size_t h = os_track_slot(lo);
  for (size_t i = 0; i < OS_TRACK_SLOTS; i++) {
    os_range_t *r = &t[(h + i) & (OS_TRACK_SLOTS - 1)];
    uintptr_t empty = 0;
    if (__atomic_compare_exchange_n(&r->lo, &empty, lo, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      __atomic_store_n(&r->hi, hi, __ATOMIC_RELEASE);
      return;
    }
  }
  __atomic_store_n(&os_track_overflow, true, __ATOMIC_RELAXED);
}

/* The slot of the range holding addr: from lo's own slot on, where a whole unmap finds it at
   once; an unmap of part of a range looks through the table. */
static os_range_t *os_track_find(os_range_t *t, uintptr_t addr) {
  size_t h = os_track_slot(addr);
  for (size_t i = 0; i < OS_TRACK_SLOTS; i++) {
    os_range_t *r = &t[(h + i) & (OS_TRACK_SLOTS - 1)];
    uintptr_t lo = __atomic_load_n(&r->lo, __ATOMIC_ACQUIRE);
    if (lo && addr >= lo && addr < __atomic_load_n(&r->hi, __ATOMIC_ACQUIRE)) return r;
  }
  return NULL;
}

void os_track_remove(uintptr_t lo, uintptr_t hi) {
  os_range_t *t = __atomic_load_n(&os_track, __ATOMIC_ACQUIRE);
  if (!t || hi <= lo) return;
  os_range_t *r = os_track_find(t, lo);
  if (!r) return;
  uintptr_t was_lo = r->lo, was_hi = r->hi;
  __atomic_store_n(&r->hi, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&r->lo, 0, __ATOMIC_RELEASE);
  if (was_lo < lo) os_track_add(was_lo, lo); /* the parts left mapped */
  if (hi < was_hi) os_track_add(hi, was_hi);
}

bool os_track_start(void) {
  if (__atomic_load_n(&os_track, __ATOMIC_ACQUIRE)) return true;
  size_t bytes = OS_TRACK_SLOTS * sizeof(os_range_t);
  void *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (t == MAP_FAILED) return false;
  os_range_t *none = NULL;
  if (!__atomic_compare_exchange_n(&os_track, &none, (os_range_t *)t, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    munmap(t, bytes);
    return true;
  }
  os_track_add((uintptr_t)t, (uintptr_t)t + bytes); /* the table is magpie's too */
  return true;
}

size_t os_tracked(os_range_t *out, size_t cap) {
  os_range_t *t = __atomic_load_n(&os_track, __ATOMIC_ACQUIRE);
  if (!t || __atomic_load_n(&os_track_overflow, __ATOMIC_RELAXED)) return SIZE_MAX;
  size_t n = 0;
  for (size_t i = 0; i < OS_TRACK_SLOTS; i++) {
    uintptr_t lo = __atomic_load_n(&t[i].lo, __ATOMIC_ACQUIRE);
    uintptr_t hi = __atomic_load_n(&t[i].hi, __ATOMIC_ACQUIRE);
    if (!lo || hi <= lo) continue;
    if (n == cap) return SIZE_MAX;
    out[n++] = (os_range_t){lo, hi};
  }
  return n;
}
