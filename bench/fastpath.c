/*
 * fastpath: N malloc+free pairs of one size, for counting instructions under callgrind.
 *
 * bench/callgrind.sh runs this twice per size and allocator, with N1 and N2 pairs, and reports
 * (Ir(N2) - Ir(N1)) / (N2 - N1): the instructions of one malloc+free pair on the fast path, with
 * start-up and the first (slow-path) allocations cancelled out. The loop itself adds about five
 * instructions per pair, the same for every allocator.
 *
 * Built with -DFASTPATH_NEW (and libstdc++), the pair is C++'s operator new(SIZE) and the sized
 * operator delete(p, SIZE), as a delete-expression calls them. The loop takes and gives back
 * one block over and over; blocks the allocator hands out page-aligned are kept allocated
 * before it (at most 64), so that its block is one as a program's blocks mostly are: magpie's
 * sized delete sends a page-aligned block (the first of a fresh slab, and one in 4096 / SIZE
 * of the others) to the page map (src/front/fastpath.h), which docs/measurements.md counts.
 *
 *   fastpath SIZE N
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef FASTPATH_NEW
/* operator new(size_t) and operator delete(void *, size_t), by their Itanium ABI names */
void *fastpath_new(size_t size) __asm__("_Znwm");
void fastpath_delete(void *p, size_t size) __asm__("_ZdlPvm");
#define PAIR_ALLOC(size) fastpath_new(size)
#define PAIR_FREE(p, size) fastpath_delete(p, size)
#define PAIR_NAME "new+delete"
#define RESULT_NAME "fastpath_sized"
#else
#define PAIR_ALLOC(size) malloc(size)
#define PAIR_FREE(p, size) ((void)(size), free(p))
#define PAIR_NAME "malloc+free"
#define RESULT_NAME "fastpath"
#endif

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fastpath SIZE N\n");
    return 2;
  }
  size_t size = strtoul(argv[1], NULL, 0);
  long n = atol(argv[2]);
  void *volatile sink;
#ifdef FASTPATH_NEW
  void *kept[64];
  int nkept = 0;
  while (nkept < 64) {
    void *p = PAIR_ALLOC(size);
    if (((uintptr_t)p & 4095) != 0) { /* this one: back on top, for the loop to take */
      PAIR_FREE(p, size);
      break;
    }
    kept[nkept++] = p;
  }
#endif
  for (long i = 0; i < n; i++) {
    void *p = PAIR_ALLOC(size);
    if (p == NULL) return 1;
    sink = p;
    PAIR_FREE(sink, size);
  }
#ifdef FASTPATH_NEW
  while (nkept > 0)
    PAIR_FREE(kept[--nkept], size);
#endif
  printf("RESULT " RESULT_NAME " time=0 size=%zu pairs=%ld pair=%s\n", size, n, PAIR_NAME);
  return 0;
}
