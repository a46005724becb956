/* threads_now: how many threads the calling process runs, for the preload tests that check
   whether magpie started one of its own. */
#ifndef MAGPIE_TESTS_THREADS_NOW_H
#define MAGPIE_TESTS_THREADS_NOW_H

#include <stdio.h>

/* The threads the process runs now (/proc/self/status), or -1. */
static inline int threads_now(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  int n = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

#endif
