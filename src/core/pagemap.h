/*
 * pagemap: address -> what magpie knows of that page, in two levels over the 47-bit user
 * address space. A leaf covers 1 GiB (2^18 pages) and is mapped on first use; untouched parts of
 * a leaf cost no memory. An entry is:
 *   0                          not magpie's (or not the first page of a large block)
 *   slab | tag (1..SC_COUNT)   a page of a malloc size-class slab; slab descriptors are
 *                              128-byte aligned, the tag is the size class
 *   slab | PM_TAG_CACHE        a page of an object-cache slab (magpie_cache_*)
 *   slot << 7 | PM_TAG_SAMPLE  the page of a sampled guard allocation (sample.c)
 *   block | PM_TAG_PROFILED    the first page of a large block the heap profiler sampled: its
 *                              record (debug/prof.c, 128-byte aligned) holds the large entry
 *   pages << 7 | PM_TAG_LARGE  the first page of a large block of that many pages
 * Entries are written only when memory is handed to a slab or a large block, before any pointer
 * into it escapes, and cleared before it is given back; readers need no lock.
 * The hot leaf: the leaf of the first malloc slab's GiB is also reachable without the root
 * (pagemap_hot), so that a free there finds its entry in one dependent load, not two: most
 * programs' small blocks lie in that GiB. It is claimed once and never changes, like every
 * leaf (leaves are never unmapped); the leaf is published before the root index (release),
 * and a reader that matches the index (acquire) finds the leaf.
 * The hot tags: the hot leaf's GiB also has one byte a page, its entry's tag (pagemap_tag),
 * which is all free's fast path needs: 64 pages a cache line where the entries hold 8, so a
 * program freeing blocks all over a big heap misses the cache (and the TLB) an eighth as often
 * there. An address less the GiB's first is both the test (below 1 GiB: in the hot GiB) and,
 * over the page size, the tag's index. Before the claim the hot GiB is the address space's last,
 * where no block of a program lies, and its tags pagemap_no_tags, all 0: a pointer there (freed
 * by mistake) takes the slow path too. Written with the entries from the claim on; a page set
 * before its GiB was claimed reads 0 until set again, which sends its frees to the slow path,
 * where the entry decides.
 */
#ifndef MAGPIE_PAGEMAP_H
#define MAGPIE_PAGEMAP_H

#include "export.h"
#include "os.h"
#include <stdbool.h>
#include <stdint.h>

#define PM_ROOT_BITS 17
#define PM_LEAF_BITS (OS_ADDR_BITS - OS_PAGE_SHIFT - PM_ROOT_BITS)
#define PM_HOT_BYTES ((uintptr_t)1 << (PM_LEAF_BITS + OS_PAGE_SHIFT)) /* the hot leaf's GiB */
#define PM_TAG_MASK ((uintptr_t)127)
#define PM_TAG_PROFILED ((uintptr_t)124)
#define PM_TAG_SAMPLE ((uintptr_t)125)
#define PM_TAG_CACHE ((uintptr_t)126)
#define PM_TAG_LARGE ((uintptr_t)127)

extern MAGPIE_HIDDEN uintptr_t *pagemap_root[(size_t)1 << PM_ROOT_BITS];

/* Read by every free and written once: a line of its own (the type's alignment pads it). */
typedef struct pagemap_hot {
  uintptr_t root; /* the root index of the hot leaf; none matches before it is claimed */
  uintptr_t base; /* the address of its GiB's first byte (before the claim: see above) */
  uintptr_t *leaf;
  uint8_t *tags; /* the tag of each page of the hot GiB, or 0 */
} __attribute__((aligned(OS_LINE))) pagemap_hot_t;
extern MAGPIE_HIDDEN pagemap_hot_t pagemap_hot;
extern MAGPIE_HIDDEN uint8_t pagemap_no_tags[PM_HOT_BYTES >> OS_PAGE_SHIFT];

/* Where addr's entry is: its leaf's index in the root (beyond the root: above the 47-bit
   space), its page's index in the leaf. */
static MP_INLINE uintptr_t pagemap_root_index(uintptr_t addr) {
  return addr >> (OS_ADDR_BITS - PM_ROOT_BITS);
}
static MP_INLINE uintptr_t pagemap_leaf_index(uintptr_t addr) {
  return (addr >> OS_PAGE_SHIFT) & (((uintptr_t)1 << PM_LEAF_BITS) - 1);
}

static MP_INLINE uintptr_t pagemap_get(uintptr_t addr) {
  uintptr_t root = pagemap_root_index(addr), index = pagemap_leaf_index(addr);
  uintptr_t *leaf;
  if (MP_LIKELY(root == __atomic_load_n(&pagemap_hot.root, __ATOMIC_ACQUIRE))) {
    leaf = __atomic_load_n(&pagemap_hot.leaf, __ATOMIC_RELAXED);
  } else {
    if (__builtin_expect(root >= ((uintptr_t)1 << PM_ROOT_BITS), 0)) return 0;
    leaf = __atomic_load_n(&pagemap_root[root], __ATOMIC_ACQUIRE);
    if (__builtin_expect(leaf == NULL, 0)) return 0;
  }
  return __atomic_load_n(&leaf[index], __ATOMIC_RELAXED);
}

/* The tag of addr's page (PM_TAG_MASK's bits of its entry), from the hot tags where addr lies in
   the hot leaf's GiB; there it may be 0 where the entry is not (see the theory above). */
static MP_INLINE uintptr_t pagemap_tag(uintptr_t addr) {
  uintptr_t off = addr - __atomic_load_n(&pagemap_hot.base, __ATOMIC_ACQUIRE);
  if (MP_LIKELY(off < PM_HOT_BYTES)) /* one compare: in the hot GiB */
    return __atomic_load_n(
        &__atomic_load_n(&pagemap_hot.tags, __ATOMIC_RELAXED)[off >> OS_PAGE_SHIFT],
        __ATOMIC_RELAXED);
  return pagemap_get(addr) & PM_TAG_MASK;
}

/* Sets the entries of every page in [addr, addr+size); false if a leaf could not be mapped. */
bool pagemap_set(uintptr_t addr, size_t size, uintptr_t value);

#endif
