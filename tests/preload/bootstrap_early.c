/*
 * A library preloaded beside libmagpie whose constructor allocates before main, possibly before
 * magpie's own constructor has run: the first malloc of the process may come from here.
 */
#include <stdlib.h>
#include <string.h>

#define EARLY_BLOCKS 64

static char *early[EARLY_BLOCKS];

__attribute__((constructor)) static void early_init(void) {
  for (int i = 0; i < EARLY_BLOCKS; i++) {
    size_t size = 8 + (size_t)i * 1500; /* small and large blocks */
    early[i] = malloc(size);
    if (early[i]) memset(early[i], 'a' + i % 26, size);
  }
}

/* The blocks, for the program to check and free (proof they came from the same malloc). */
char **early_blocks(int *count) {
  *count = EARLY_BLOCKS;
  return early;
}
