/*
 * magpie's background thread starts on an allocation's slow path, never on a free's, under
 * LD_PRELOAD=libmagpie.so with MAGPIE_OPTIONS=reaper=2 (the thread in a single-threaded
 * program too, so that this one need start none).
 *
 *   preload_reaper_free
 *
 * glibc frees a dead thread's TLS inside pthread_join while it holds the lock of its cache of
 * thread stacks, which pthread_create takes: a free there that started the reaper would wait on
 * itself forever (src/front/caches.c theory 3). The program holds 8 MiB of small blocks (below
 * the thread's 32 MiB threshold), then one large block of 40 MiB (past it: a large block takes
 * no magazine's slow path), and frees the small blocks, whose slow paths tick the reap: no
 * thread may start there. Then it allocates again, and the thread must start (within 2 s).
 */
#include "../api/check.h"
#include "threads_now.h"

#define SMALL_BYTES (8u << 20)
#define SMALL_BLOCK 64
#define LARGE_BYTES ((size_t)40 << 20)
#define WAIT_MS 2000

int main(void) {
  api_begin("reaper_free");
  static void *small[SMALL_BYTES / SMALL_BLOCK];
  for (size_t i = 0; i < SMALL_BYTES / SMALL_BLOCK; i++)
    REQUIRE((small[i] = malloc(SMALL_BLOCK)) != NULL);
  REQUIRE(threads_now() == 1); /* below the threshold: no thread yet */
  void *large = malloc(LARGE_BYTES);
  REQUIRE(large != NULL);
  for (int round = 0; round < 3; round++) { /* frees only, some reap intervals apart */
    for (size_t i = round; i < SMALL_BYTES / SMALL_BLOCK; i += 3)
      free(small[i]);
    usleep(30 * 1000);
  }
  int after_frees = threads_now();
  if (after_frees != 1) {
    fprintf(stderr, "reaper_free: %d threads after frees alone, expected 1\n", after_frees);
    api_failures++;
  }
  int threads = after_frees;
  for (int ms = 0; ms < WAIT_MS && threads != 2; ms += 10) {
    for (size_t i = 0; i < 4096; i++) /* allocations' slow paths */
      REQUIRE((small[i] = malloc(SMALL_BLOCK)) != NULL);
    for (size_t i = 0; i < 4096; i++)
      free(small[i]);
    usleep(10 * 1000);
    threads = threads_now();
  }
  if (threads != 2) {
    fprintf(stderr, "reaper_free: %d threads after allocations, expected 2\n", threads);
    api_failures++;
  }
  free(large);
  return api_end();
}
