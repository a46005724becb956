/*
 * simple: one thread allocates a batch of blocks of one size, writes each whole, then frees
 * them in the order it allocated them; batches of 25, 100, 400 and 1600 blocks, for sizes S,
 * 2S and 4S, each done three times: in the main thread, in a second thread while the main
 * waits, and in the main thread again once the process has had two threads. Modelled on
 * glibc's benchtests/bench-malloc-simple (which mimalloc-bench runs as glibc-simple), whose
 * counts it keeps by default; written for callgrind, where its cost is deterministic:
 * allocation fast paths, and a magazine miss every few dozen blocks of a batch.
 *
 *   simple [-i pairs per batch size (default 2000000)] [-n S (default 16)]
 */
#include "bench.h"

#define BATCH_SIZES 4
#define BATCH_MAX 1600

static const char usage[] =
    "simple: batches of 25..1600 blocks of sizes S, 2S, 4S allocated, written, freed in order\n"
    "  -i blocks per batch size and pass (default 2000000)   -n S (default 16)\n";

static const int batches[BATCH_SIZES] = {25, 100, 400, BATCH_MAX};

typedef struct {
  size_t size;
  long blocks; /* per batch size */
} pass_t;

static void *pass(void *arg) {
  const pass_t *p = arg;
  static int *block[BATCH_MAX];
  for (int b = 0; b < BATCH_SIZES; b++) {
    int n = batches[b];
    for (long round = 0; round < p->blocks / n; round++) {
      for (int i = 0; i < n; i++) {
        int *q = malloc(p->size);
        if (q == NULL) bench_die("malloc(%zu) returned NULL", p->size);
        for (size_t k = 0; k < p->size / sizeof(int); k++)
          q[k] = (int)k;
        block[i] = q;
      }
      for (int i = 0; i < n; i++)
        free(block[i]);
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 1, .iters = 2000000, .seed = 1, .n = 16};
  bench_parse(argc, argv, &a, usage);
  if (a.n < 1) bench_die("-n must be >= 1");
  double t0 = bench_now();
  for (int scale = 1; scale <= 4; scale *= 2) {
    pass_t p = {.size = (size_t)a.n * (size_t)scale, .blocks = a.iters};
    pass(&p); /* warm-up, as the original */
    pass(&p);
    pthread_t t;
    if (pthread_create(&t, NULL, pass, &p) != 0) bench_die("pthread_create failed");
    pthread_join(t, NULL);
    pass(&p);
  }
  double secs = bench_now() - t0;
  printf("RESULT simple time=%.4f pairs=%ld\n", secs, a.iters * 3 * 4);
  return 0;
}
