/*
 * large: blocks above SC_SMALL_MAX (256 KiB) come straight from the heap arena, page granular.
 *
 * Theory
 *   1. The block's size lives in the page-map entry of its first page (pages << 7 | LARGE),
 *      so no descriptor is needed; the other pages map to nothing, and free() of a pointer
 *      that is not the first byte is refused.
 *   2. A block takes free space of the arena when it fits; when none does, a block of at least
 *      `large_own` bytes (default 1 MiB) gets a span of exactly its size (which realloc can
 *      remap), a smaller one a share of a new 4 MiB span. Freed, blocks return to the arena (its
 *      quantum caches first), which keeps up to `retain` bytes free for reuse and purges or
 *      releases the rest (a reused page costs no fault; a fresh one faults when touched).
 *   3. calloc skips the memset when the arena says the pages are clean (never written since
 *      the kernel zeroed them, or purged since). Touching such pages costs a fault each, two
 *      when the program reads a page before writing it (the zero page, then a copy); blocks up
 *      to `calloc_populate` bytes have them all mapped at once instead (populate.c), bigger ones
 *      stay lazy, since a program may calloc a big table and use little of it.
 *   4. realloc grows or shrinks in place when the arena can (vmem_resize); a block with a span
 *      of its own is remapped, so growing a many-MiB vector copies no bytes.
 */
#include "large.h"
#include "mag.h"
#include "options.h"
#include "pagemap.h"
#include "populate.h"
#include "slab.h"

#include <errno.h>
#include <string.h>

/* Bigger can never be mapped (os.h), so it fails without a system call; the margin keeps a
   request with its page rounding and its alignment's slack inside the address space. */
#define LARGE_MAX (((size_t)1 << OS_ADDR_BITS) - ((size_t)1 << 31))

static size_t large_live;      /* bytes in large blocks (atomic) */
static size_t large_blocks;    /* large blocks live (atomic) */
static size_t large_live_peak; /* high-water marks of the two (atomic) */
static size_t large_blocks_peak;

static uintptr_t large_entry(size_t bytes) {
  return (bytes >> OS_PAGE_SHIFT) << 7 | PM_TAG_LARGE;
}

size_t large_size(uintptr_t entry) {
  return (entry >> 7) << OS_PAGE_SHIFT;
}

size_t large_live_bytes(void) {
  return __atomic_load_n(&large_live, __ATOMIC_RELAXED);
}

void large_peaks(size_t *blocks, size_t *bytes) {
  *blocks = __atomic_load_n(&large_blocks_peak, __ATOMIC_RELAXED);
  *bytes = __atomic_load_n(&large_live_peak, __ATOMIC_RELAXED);
}

static void large_account(size_t bytes, int sign) {
  if (sign > 0) {
    mag_raise_peak(&large_live_peak, __atomic_add_fetch(&large_live, bytes, __ATOMIC_RELAXED));
    mag_raise_peak(&large_blocks_peak, __atomic_add_fetch(&large_blocks, 1, __ATOMIC_RELAXED));
  } else {
    __atomic_sub_fetch(&large_live, bytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&large_blocks, 1, __ATOMIC_RELAXED);
  }
  mag_held_add(sign > 0 ? (ptrdiff_t)bytes : -(ptrdiff_t)bytes);
}

void *large_alloc(size_t size, size_t align, bool zero) {
  if (size > LARGE_MAX || align > LARGE_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  bool clean;
  size_t bytes = (size + OS_PAGE - 1) & ~(OS_PAGE - 1);
  void *p = vmem_alloc(&heap_arena, bytes, align, bytes >= opt.large_own ? VMEM_OWN : 0, &clean);
  if (p && !pagemap_set((uintptr_t)p, OS_PAGE, large_entry(bytes))) {
    vmem_free(&heap_arena, p, bytes);
    p = NULL;
  }
  if (!p) {
    errno = ENOMEM;
    return NULL;
  }
  if (zero && !clean)
    memset(p, 0, size);
  else if (zero && bytes <= opt.calloc_populate)
    populate_range(p, bytes); /* maps every page at once: a fault per page costs more */
  large_account(bytes, 1);
  mag_large_count(size, 1);
  return p;
}

void large_free(void *p, uintptr_t entry) {
  size_t bytes = large_size(entry);
  pagemap_set((uintptr_t)p, OS_PAGE, 0);
  vmem_free(&heap_arena, p, bytes);
  large_account(bytes, -1);
  mag_large_count(bytes, -1);
}

void *large_resize(void *p, uintptr_t entry, size_t size) {
  size_t old = large_size(entry), bytes = (size + OS_PAGE - 1) & ~(OS_PAGE - 1);
  if (size > LARGE_MAX) return NULL;
  /* A move frees p's range at once, for another thread to map (a slab may start there): its
     entry goes first, and comes back if the block stays. */
  uintptr_t was = pagemap_get((uintptr_t)p);
  pagemap_set((uintptr_t)p, OS_PAGE, 0);
  void *q = vmem_resize(&heap_arena, p, old, bytes);
  pagemap_set((uintptr_t)(q ? q : p), OS_PAGE, q ? large_entry(bytes) : was);
  if (!q) return NULL;
  large_account(old, -1);
  large_account(bytes, 1);
  return q;
}
