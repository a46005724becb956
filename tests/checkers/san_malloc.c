/*
 * san_malloc: whose malloc a program built with a sanitizer calls when magpie is preloaded or
 * linked (docs/sanitizers.md; run by sanitizers.sh). Prints "malloc: magpie" or
 * "malloc: not magpie"; with "overrun", writes one byte past a 24-byte block, which the
 * sanitizer reports when its malloc served the block.
 */
#include "check.h"

static char *volatile block;

int main(int argc, char **argv) {
  block = malloc(24);
  printf("malloc: %s\n", api_magpie_loaded() ? "magpie" : "not magpie");
  fflush(stdout);
  if (argc > 1 && strcmp(argv[1], "overrun") == 0) block[24] = 1;
  free(block);
  return 0;
}
