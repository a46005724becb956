/*
 * Harness of the layer unit tests: each test drives one layer directly (linked against
 * magpie_core_asan, the core under ASan+UBSan without malloc interposition). UCHECK stops the
 * test at the first broken expectation with file:line, which is where to start reading.
 */
#ifndef MAGPIE_TESTS_UNIT_H
#define MAGPIE_TESTS_UNIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UCHECK(expr)                                                                               \
  do {                                                                                             \
    if (!(expr)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* Makes the test run with MAGPIE_OPTIONS=options whatever its environment says: magpie reads
   them once, before main, so a test that depends on them executes itself again with them. */
static inline void unit_options(char **argv, const char *options) {
  const char *now = getenv("MAGPIE_OPTIONS");
  if (now && strcmp(now, options) == 0) return;
  setenv("MAGPIE_OPTIONS", options, 1);
  execv("/proc/self/exe", argv);
  perror("unit_options: execv /proc/self/exe");
  exit(1);
}

/* xorshift64*: deterministic sequences for randomised operations. */
static inline uint64_t unit_rand(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545f4914f6cdd1dULL;
}

#endif
