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

#define UCHECK(expr)                                                                               \
  do {                                                                                             \
    if (!(expr)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* xorshift64*: deterministic sequences for randomised operations. */
static inline uint64_t unit_rand(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545f4914f6cdd1dULL;
}

#endif
