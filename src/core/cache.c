/*
 * cache: setting up one cache - its slab geometry and its magazines' size. The structure is in
 * cache.h; front/caches.c sets up malloc's classes and the object caches with cache_setup.
 *
 * Theory
 *   1. Slab geometry: objects of `stride` bytes in spans of sc_span_for(stride) (sizeclass.c);
 *      div_magic lets an object's index be found with one multiply.
 *   2. Magazine size: a cache starts with magazines of about MAG_BYTES_START of objects, 32..64
 *      rounds (64 up to 128-byte blocks, 32 above; fewer where 32 would hold more than
 *      MAG_BYTES_MAX, at least 2), and its depot may double them under contention up to
 *      MAG_BYTES_MAX and 256 rounds, or for blocks of 128 bytes and less, whose exchanges move
 *      the fewest bytes, up to MAG_DEEP_BYTES and 1024 rounds: on many cores, threads that pass
 *      small blocks to each other otherwise queue on the depot's lock (cross-thread-frees.md).
 *      Slow start (mag.c theory 5) keeps a thread that uses a class a little from reserving a
 *      magazine's worth; 32 rounds and more keep one that churns batches of a few dozen blocks
 *      a class off the depot and its loaded and previous magazines from trading places every
 *      batch (docs/decisions/magazine-size.md). MAGPIE_OPTIONS=mag_rounds sets the start for
 *      every cache.
 */
#include "cache.h"
#include "depot.h"
#include "options.h"
#include "os.h"
#include "sizeclass.h"

#include <string.h>

_Static_assert(OPT_MAG_ROUNDS_MAX <= MAG_CAP_MAX,
               "mag_rounds starts no magazine depots cannot make");

#define MAG_BYTES_START ((size_t)8 << 10) /* objects in a first magazine, in 32..64 rounds */
#define MAG_BYTES_MAX ((size_t)256 << 10) /* but no more than this (2 rounds at least) */
#define MAG_ROUNDS_DEEP 256u              /* past this many rounds, contention grows ... */
#define MAG_DEEP_BYTES ((size_t)64 << 10) /* ... only magazines of no more than this */

/* Line-aligned, and each cache a whole number of lines: one class's depot, written at every
   exchange, never shares a line with the next class's read-only head. */
cache_t malloc_caches[SC_COUNT + 1] __attribute__((aligned(OS_LINE)));
_Static_assert(sizeof(cache_t) % OS_LINE == 0, "a cache is a whole number of lines");

static uint32_t pow2_floor(size_t v) {
  return v ? (uint32_t)1 << (63 - __builtin_clzl(v)) : 0;
}

static uint32_t clamp_rounds(size_t v, uint32_t lo, uint32_t hi) {
  uint32_t r = pow2_floor(v);
  return r < lo ? lo : r > hi ? hi : r;
}

void cache_setup(cache_t *cp, const char *name, size_t stride, uintptr_t tag) {
  os_touch(cp, sizeof *cp); /* mapped: its slab and depot fields are first written under locks */
  size_t n = strlen(name);
  if (n >= sizeof cp->name) n = sizeof cp->name - 1;
  memcpy(cp->name, name, n);
  cp->name[n] = '\0';
  cp->size = stride;
  cp->div_magic = UINT64_MAX / stride + 1;
  cp->span = sc_span_for(stride);
  cp->per_slab = (uint32_t)(cp->span / stride);
  cp->tag = tag;
  lock_init(&cp->slab_lock);
  cp->waking = NULL;
  uint32_t start = clamp_rounds(MAG_BYTES_START / stride, 32, 64);
  start = clamp_rounds(MAG_BYTES_MAX / stride, 2, start);
  if (opt.mag_rounds) start = clamp_rounds(opt.mag_rounds, 1, MAG_CAP_MAX);
  uint32_t cap_max = clamp_rounds(MAG_BYTES_MAX / stride, start, MAG_ROUNDS_DEEP);
  if (cap_max == MAG_ROUNDS_DEEP) /* small blocks: one exchange moves so few bytes */
    cap_max = clamp_rounds(MAG_DEEP_BYTES / stride, cap_max, MAG_CAP_MAX);
  depot_init(cp, start, cap_max);
}
