/*
 * magpie's background thread and single-threaded programs, under LD_PRELOAD=libmagpie.so.
 *
 *   preload_reaper_single THREADS
 *
 * The program, which starts no thread, holds 48 MiB (past the thread's 32 MiB threshold) and
 * keeps allocating and freeing for 0.3 s (up to 2 s until the count is right), then checks how many threads it runs: THREADS.
 * By default magpie starts no thread in a program that has run none (glibc's fork is
 * async-signal-safe only in such a program: docs/guarantees.md), so 1; with reaper=2 it does,
 * so 2 once the thread has started (the program waits for it).
 */
#include "../api/check.h"
#include "threads_now.h"

#define HELD_BYTES (48u << 20)
#define HELD_BLOCK 4096
#define WAIT_MS 2000 /* the thread starts at the first reap tick; reap_ms is 20 here */
#define MIN_MS 300   /* 15 reap intervals: time enough for a thread that would start */

int main(int argc, char **argv) {
  api_begin("reaper_single");
  REQUIRE(argc == 2);
  int expected = atoi(argv[1]);
  static void *held[HELD_BYTES / HELD_BLOCK];
  for (size_t i = 0; i < HELD_BYTES / HELD_BLOCK; i++) {
    REQUIRE((held[i] = malloc(HELD_BLOCK)) != NULL);
    memset(held[i], 1, 64);
  }
  int threads = threads_now();
  for (int ms = 0; ms < WAIT_MS && (ms < MIN_MS || threads != expected); ms += 10) {
    for (int i = 0; i < 4096; i++) { /* slow paths, where the reap ticks */
      void *p = malloc(HELD_BLOCK);
      REQUIRE(p != NULL);
      free(held[i]);
      held[i] = p;
    }
    usleep(10 * 1000);
    threads = threads_now();
  }
  if (threads != expected) {
    fprintf(stderr, "reaper_single: %d threads, expected %d\n", threads, expected);
    api_failures++;
  }
  for (size_t i = 0; i < HELD_BYTES / HELD_BLOCK; i++)
    free(held[i]);
  return api_end();
}
