/*
 * Production-mode sampling (MAGPIE_OPTIONS=sample=N, src/sample.c). With sample=1 the next
 * magazine miss is sampled; sampled() allocates until it gets a sampled block. Each case
 * commits one error on a sampled block, announced as "misuse: KIND ADDRESS". `rate` counts how
 * many of 20,000 small allocations were sampled (their usable size is the request), and fails
 * unless it is about one in N. `fault` and `raise` crash the program outside the pool once the
 * pool's handler is in: a write through NULL, and a SIGSEGV sent with raise() as a crash handler
 * passes a fault on; the program must die of SIGSEGV either way, as without magpie.
 */
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void write_past_end(char *p, size_t n) { p[n] = 1; }
__attribute__((noinline)) static void touch_after_free(char *p) { p[0] = 1; }
__attribute__((noinline)) static void release(char *p) { free(p); }

/* A block of n bytes that was sampled (its usable size is exactly n; a slab block's is its
   class size): sampling is decided when the thread's magazine misses, so the blocks that come
   first are kept until the magazine runs dry. */
static char *sampled(size_t n, const char *kind) {
  for (int tries = 0; tries < 1000; tries++) {
    char *p = malloc(n);
    if (malloc_usable_size(p) == n) {
      printf("misuse: %s %p\n", kind, (void *)p);
      fflush(stdout);
      return p;
    }
  }
  printf("misuse: %s: no block was sampled\n", kind);
  exit(3);
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const char *c = argv[1];
  if (!strcmp(c, "overflow")) {
    write_past_end(sampled(4000, c), 4000); /* 4000 is a multiple of 16: the next page */
  } else if (!strcmp(c, "slack")) {
    char *p = sampled(3000, c); /* 8 bytes of rounding before the guard page */
    write_past_end(p, 3000);
    release(p);
  } else if (!strcmp(c, "use-after-free")) {
    char *p = sampled(2000, c);
    release(p);
    touch_after_free(p);
  } else if (!strcmp(c, "double-free")) {
    char *p = sampled(2000, c);
    release(p);
    release(p);
  } else if (!strcmp(c, "fault")) {
    sampled(100, c);
    *(volatile char *)(uintptr_t)(argc - 2) = 1; /* NULL, unknown to the compiler */
    return 4;
  } else if (!strcmp(c, "raise")) {
    sampled(100, c);
    raise(SIGSEGV);
    return 4;
  } else if (!strcmp(c, "rate")) {
    /* 20,000 blocks held at once (so the magazines keep missing) with sample=100: about 200
       sampled, within the pool's 256 slots; far fewer or more means sampling is broken. */
    enum { N = 20000 };
    static char *blocks[N];
    long hits = 0;
    for (int i = 0; i < N; i++) {
      blocks[i] = malloc(100); /* a slab block's usable size is its class's, 112 */
      if (malloc_usable_size(blocks[i]) == 100) hits++;
    }
    for (int i = 0; i < N; i++) free(blocks[i]);
    printf("sampled %ld of %d\n", hits, N);
    return hits >= 60 && hits <= 256 ? 0 : 1;
  }
  return 1;
}
