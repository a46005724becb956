/* pagemap: see pagemap.h for the map's theory. */
#include "pagemap.h"

uintptr_t *pagemap_root[(size_t)1 << PM_ROOT_BITS];

static uintptr_t *pagemap_leaf(uintptr_t addr) {
  uintptr_t **slot = &pagemap_root[addr >> (47 - PM_ROOT_BITS)];
  uintptr_t *leaf = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (leaf) return leaf;
  size_t bytes = sizeof(uintptr_t) << PM_LEAF_BITS;
  uintptr_t *fresh = os_map(bytes);
  if (!fresh) return NULL;
  if (__atomic_compare_exchange_n(slot, &leaf, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return fresh;
  os_unmap(fresh, bytes); /* another thread mapped this leaf first */
  return leaf;
}

bool pagemap_set(uintptr_t addr, size_t size, uintptr_t value) {
  for (uintptr_t a = addr; a < addr + size; a += OS_PAGE) {
    if (a >> 47) return false;
    uintptr_t *leaf = pagemap_leaf(a);
    if (!leaf) return false;
    __atomic_store_n(&leaf[(a >> OS_PAGE_SHIFT) & (((uintptr_t)1 << PM_LEAF_BITS) - 1)], value,
                     __ATOMIC_RELAXED);
  }
  return true;
}
