/* pagemap: see pagemap.h for the map's theory. */
#include "pagemap.h"

uintptr_t *pagemap_root[(size_t)1 << PM_ROOT_BITS];
uint8_t pagemap_no_tags[PM_HOT_BYTES >> OS_PAGE_SHIFT];
pagemap_hot_t pagemap_hot = {.root = UINTPTR_MAX, .base = -PM_HOT_BYTES, .tags = pagemap_no_tags};
static bool pagemap_hot_claimed; /* (atomic) */

static uintptr_t *pagemap_leaf(uintptr_t addr) {
  uintptr_t **slot = &pagemap_root[pagemap_root_index(addr)];
  uintptr_t *leaf = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (leaf) return leaf;
  size_t bytes = sizeof(uintptr_t) << PM_LEAF_BITS;
  uintptr_t *fresh = os_map(bytes);
  if (!fresh) return NULL;
  os_advise_huge(fresh, bytes, false); /* touched sparsely: not 2 MiB at once (THP always) */
  if (__atomic_compare_exchange_n(slot, &leaf, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return fresh;
  os_unmap(fresh, bytes); /* another thread mapped this leaf first */
  return leaf;
}

/* Makes the leaf of root index root the hot one, with its tags, if none is yet (theory in
   pagemap.h); without memory for the tags there is no hot leaf. */
static void pagemap_hot_claim(uintptr_t root, uintptr_t *leaf) {
  if (__atomic_load_n(&pagemap_hot_claimed, __ATOMIC_RELAXED) ||
      __atomic_exchange_n(&pagemap_hot_claimed, true, __ATOMIC_ACQ_REL))
    return;
  uint8_t *tags = os_map((size_t)1 << PM_LEAF_BITS);
  if (!tags) return;
  __atomic_store_n(&pagemap_hot.leaf, leaf, __ATOMIC_RELAXED);
  __atomic_store_n(&pagemap_hot.tags, tags, __ATOMIC_RELAXED);
  __atomic_store_n(&pagemap_hot.root, root, __ATOMIC_RELEASE); /* after its leaf and tags */
  __atomic_store_n(&pagemap_hot.base, root << (PM_LEAF_BITS + OS_PAGE_SHIFT), __ATOMIC_RELEASE);
}

bool pagemap_set(uintptr_t addr, size_t size, uintptr_t value) {
  uintptr_t tag = value & PM_TAG_MASK;
  for (uintptr_t a = addr; a < addr + size; a += OS_PAGE) {
    if (a >> OS_ADDR_BITS) return false;
    uintptr_t *leaf = pagemap_leaf(a), root = pagemap_root_index(a), index = pagemap_leaf_index(a);
    if (!leaf) return false;
    __atomic_store_n(&leaf[index], value, __ATOMIC_RELAXED);
    if (a == addr && tag != 0 && tag < PM_TAG_PROFILED) /* a malloc slab's first page */
      pagemap_hot_claim(root, leaf);
    if (root == __atomic_load_n(&pagemap_hot.root, __ATOMIC_ACQUIRE))
      __atomic_store_n(&pagemap_hot.tags[index], (uint8_t)tag, __ATOMIC_RELAXED);
  }
  return true;
}
