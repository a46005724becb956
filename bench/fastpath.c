/*
 * fastpath: N malloc+free pairs of one size, for counting instructions under callgrind.
 *
 * bench/callgrind.sh runs this twice per size and allocator, with N1 and N2 pairs, and reports
 * (Ir(N2) - Ir(N1)) / (N2 - N1): the instructions of one malloc+free pair on the fast path, with
 * start-up and the first (slow-path) allocations cancelled out. The loop itself adds about five
 * instructions per pair, the same for every allocator.
 *
 *   fastpath SIZE N
 */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fastpath SIZE N\n");
    return 2;
  }
  size_t size = strtoul(argv[1], NULL, 0);
  long n = atol(argv[2]);
  void *volatile sink;
  for (long i = 0; i < n; i++) {
    void *p = malloc(size);
    if (p == NULL) return 1;
    sink = p;
    free(sink);
  }
  printf("RESULT fastpath time=0 size=%zu pairs=%ld\n", size, n);
  return 0;
}
