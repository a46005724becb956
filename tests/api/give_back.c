/*
 * Pages inside slabs go back to the kernel when the heap shrank (src/core/slab.c theory 6).
 * For blocks of 64 bytes (slabs of 4 KiB pages, on the slab arena), 1000, 24000 (slabs from
 * the heap arena) and 40000 bytes (spans of 512 KiB: chunks of two pages): 8 MiB of blocks,
 * all written, then all but one every 32 KiB (or one in 16) freed, then malloc_trim(0), which
 * keeps nothing. Checked:
 *   - most pages that held only freed blocks are no longer resident (mincore); pages with a
 *     survivor stay;
 *   - the survivors kept their contents;
 *   - the freed blocks are handed out again without complaint (their pages read as zero until
 *     written), and each is usable: written and checked in full.
 * (misuse.c's hollow-double-free and hollow-write check the reports.) Debug mode keeps records
 * in free blocks and never gives such pages back, so the residency drop is expected only
 * when MAGPIE_DEBUG is unset.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <sys/mman.h>

#define HEAP ((size_t)8 << 20)
/* Survivors: one block every 32 KiB, or one in 16 (keep_one_in). */
#define KEEP_SPACING ((size_t)32 << 10)
#define PAGE ((uintptr_t)4096)
#define MAX_BLOCKS (HEAP / 64)

static unsigned char *blocks[MAX_BLOCKS];

static unsigned char pattern(size_t i, size_t j) {
  return (unsigned char)(i * 131 + j * 7 + 1);
}

static void fill(size_t i, size_t size) {
  for (size_t j = 0; j < size; j++)
    blocks[i][j] = pattern(i, j);
}

static int intact(size_t i, size_t size) {
  for (size_t j = 0; j < size; j++)
    if (blocks[i][j] != pattern(i, j)) return 0;
  return 1;
}

/* Whether page (a number) is resident; a page no longer mapped (a wholly free span went back)
   is not. */
static int resident(uintptr_t page) {
  unsigned char vec;
  if (mincore((void *)(page * PAGE), PAGE, &vec) != 0) {
    REQUIRE(errno == ENOMEM);
    return 0;
  }
  return vec & 1;
}

/* The pages (numbers) holding a byte of a survivor, sorted. */
static uintptr_t kept[MAX_BLOCKS];
static size_t kept_n;

static int compare_pages(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

static size_t keep_one_in;

static void list_survivor_pages(size_t n, size_t size) {
  kept_n = 0;
  for (size_t i = 0; i < n; i += keep_one_in)
    for (uintptr_t page = (uintptr_t)blocks[i] / PAGE;
         page <= ((uintptr_t)blocks[i] + size - 1) / PAGE; page++)
      kept[kept_n++] = page;
  qsort(kept, kept_n, sizeof kept[0], compare_pages);
}

static int survivor_page(uintptr_t page) {
  return bsearch(&page, kept, kept_n, sizeof kept[0], compare_pages) != NULL;
}

static void shrink_and_grow(size_t size) {
  size_t n = HEAP / size;
  keep_one_in = KEEP_SPACING / size > 16 ? KEEP_SPACING / size : 16;
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(opaque_size(size));
    REQUIRE(blocks[i] != NULL);
    fill(i, size);
  }
  for (size_t i = 0; i < n; i++)
    if (i % keep_one_in) free(blocks[i]);
  malloc_trim(0);

  if (!getenv("MAGPIE_DEBUG")) { /* debug mode unmaps some freed blocks: mincore fails */
    list_survivor_pages(n, size);
    size_t pages = 0, gone = 0; /* pages of freed blocks that no survivor shares (per block) */
    for (size_t i = 0; i < n; i++) {
      if (i % keep_one_in == 0) continue;
      uintptr_t last = ((uintptr_t)blocks[i] + size - 1) / PAGE;
      for (uintptr_t page = (uintptr_t)blocks[i] / PAGE; page <= last; page++)
        if (!survivor_page(page)) {
          pages++;
          gone += !resident(page);
        }
    }
    if (gone * 4 < pages * 3)
      NOTE("give_back: blocks of %zu bytes: %zu of %zu pages gone\n", size, gone, pages);
    CHECK(gone * 4 >= pages * 3);
    CHECK(pages >= n / 4); /* the check above is not vacuous */
  }
  for (size_t i = 0; i < n; i += keep_one_in) {
    CHECK(resident((uintptr_t)blocks[i] / PAGE));
    CHECK(intact(i, size));
  }

  for (size_t i = 0; i < n; i++)
    if (i % keep_one_in) {
      blocks[i] = malloc(opaque_size(size));
      REQUIRE(blocks[i] != NULL);
      fill(i, size);
    }
  for (size_t i = 0; i < n; i++) {
    CHECK(intact(i, size));
    free(blocks[i]);
  }
}

int main(void) {
  api_begin("give_back");
  static const size_t sizes[] = {64, 1000, 24000, 40000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    shrink_and_grow(sizes[k]);
  return api_end();
}
