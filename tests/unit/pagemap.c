/* The page map: entries set over a range read back page by page, across leaf boundaries,
   and addresses magpie never mapped (or beyond 47 bits) read as 0; the hot leaf is the first
   malloc slab's (not a large block's, set before it), never changes after, and reads the same
   as through the root; pagemap_tag reads each entry's tag, from the hot tags in the hot GiB,
   where a page set before the claim reads 0 until set again, and reads 0 before any claim. */
#include "pagemap.h"
#include "unit.h"

int main(void) {
  uintptr_t leaf_edge = (uintptr_t)1 << 40; /* a 1 GiB boundary: two leaves */
  uintptr_t start = leaf_edge - 4 * OS_PAGE, large = (uintptr_t)1 << 41;
  UCHECK(pagemap_hot.root == UINTPTR_MAX && pagemap_hot.leaf == NULL);
  /* before the claim, the hot GiB is the address space's last, its tags all 0 */
  UCHECK(pagemap_tag(UINTPTR_MAX - 15) == 0 && pagemap_tag(-PM_HOT_BYTES) == 0);
  UCHECK(pagemap_set(large, OS_PAGE, 3 << 7 | PM_TAG_LARGE)); /* no slab: claims nothing */
  UCHECK(pagemap_hot.root == UINTPTR_MAX && pagemap_get(large) == (3 << 7 | PM_TAG_LARGE));
  UCHECK(pagemap_get(start) == 0 && pagemap_tag(start) == 0 && pagemap_tag(0) == 0);
  uintptr_t early = start - 2 * OS_PAGE; /* in the GiB the slab below claims, set before it */
  UCHECK(pagemap_set(early, OS_PAGE, 1 << 7 | PM_TAG_LARGE) && pagemap_tag(early) == PM_TAG_LARGE);
  UCHECK(pagemap_set(start, 8 * OS_PAGE, 0x1280 | 5));
  UCHECK(pagemap_hot.root == start >> 30 && pagemap_hot.leaf == pagemap_root[start >> 30]);
  UCHECK(pagemap_set(large + OS_PAGE, OS_PAGE, 0x1300 | 7)); /* a later slab: the hot one stays */
  UCHECK(pagemap_hot.root == start >> 30 && pagemap_get(large + OS_PAGE) == (0x1300 | 7));
  for (uintptr_t a = start; a < start + 8 * OS_PAGE; a += 512)
    UCHECK(pagemap_get(a) == (0x1280 | 5) && pagemap_tag(a) == 5); /* half of it in the hot GiB */
  UCHECK(pagemap_tag(early) == 0 && pagemap_get(early) == (1 << 7 | PM_TAG_LARGE)); /* not yet */
  UCHECK(pagemap_set(early, OS_PAGE, 0x1400 | 9) && pagemap_tag(early) == 9);
  UCHECK(pagemap_tag(large) == PM_TAG_LARGE); /* outside the hot GiB: through the root */
  UCHECK(pagemap_get(start - 1) == 0);
  UCHECK(pagemap_get(start + 8 * OS_PAGE) == 0);
  UCHECK(pagemap_set(start + OS_PAGE, OS_PAGE, 0));
  UCHECK(pagemap_get(start + OS_PAGE) == 0 && pagemap_get(start) == (0x1280 | 5));
  UCHECK(pagemap_tag(start + OS_PAGE) == 0 && pagemap_tag(start) == 5);
  UCHECK(pagemap_get((uintptr_t)1 << 47) == 0 && pagemap_get(UINTPTR_MAX) == 0);
  UCHECK(pagemap_tag((uintptr_t)1 << 47) == 0 && pagemap_tag(UINTPTR_MAX) == 0);
  UCHECK(pagemap_tag(start - (start & ((1 << 30) - 1)) - 1) == 0); /* just below the hot GiB */
  UCHECK(pagemap_hot.base == leaf_edge - PM_HOT_BYTES);
  UCHECK(pagemap_set(leaf_edge, OS_PAGE, 0x1480 | 11)); /* just above it: through the root */
  UCHECK(pagemap_tag(leaf_edge) == 11 && pagemap_tag(leaf_edge - 1) == 5);
  UCHECK(!pagemap_set((uintptr_t)1 << 47, OS_PAGE, 1));
  UCHECK(pagemap_get(0) == 0);
  printf("pagemap: ok\n");
  return 0;
}
