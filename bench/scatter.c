/*
 * scatter: threads free big batches of blocks of one size in random order.
 *
 * Models a program that builds a large structure of small nodes (a hash table, a tree, a parse)
 * and tears it down in an order unrelated to where the nodes lie. More blocks are freed than
 * any cache keeps, so they travel back to the allocator's central structures (magpie's slabs,
 * tcmalloc's spans, jemalloc's bins, mimalloc's pages), each block to its own place in them:
 * the time is that bookkeeping's cache misses and, with T threads freeing blocks of the same
 * size at once, how long each holds whatever lock guards it. The run: each of T threads (-t)
 * allocates -n blocks of 64 bytes, writes each, shuffles them, checks each, and after a barrier
 * frees them; -i rounds of that in all, shared by the threads.
 * Reported: time, the threads' free phases summed over the rounds (the mean over threads).
 *
 *   scatter [-t threads] [-i rounds] [-n blocks per thread and round] [-s seed]
 */
#include "bench.h"

#define SIZE 64

static const char usage[] =
    "scatter: threads allocate -n 64-byte blocks each, then free them in random order\n"
    "  -t threads (default 2)   -i rounds (default 10, shared by the threads)\n"
    "  -n blocks per thread and round (default 500000)   -s seed\n";

typedef struct {
  long blocks, rounds;
  uint64_t seed;
  double free_secs;
  pthread_barrier_t *phase;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  void **p = bench_xmalloc((size_t)w->blocks * sizeof(*p));
  bench_rng_t r;
  bench_rng_init(&r, w->seed, 0);
  for (long round = 0; round < w->rounds; round++) {
    for (long i = 0; i < w->blocks; i++) {
      p[i] = bench_xmalloc(SIZE);
      bench_fill(p[i], SIZE, (uint64_t)p[i]);
    }
    for (long i = w->blocks - 1; i > 0; i--) { /* which slot holds block i is now random */
      long j = (long)bench_below(&r, (uint64_t)i + 1);
      void *t = p[i];
      p[i] = p[j];
      p[j] = t;
    }
    for (long i = 0; i < w->blocks; i++)
      bench_check(p[i], SIZE, (uint64_t)p[i], "scatter");
    pthread_barrier_wait(w->phase); /* the threads free at once */
    double t0 = bench_now();
    for (long i = 0; i < w->blocks; i++)
      free(p[i]);
    w->free_secs += bench_now() - t0;
    pthread_barrier_wait(w->phase);
  }
  free(p);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 10, .n = 500000, .seed = 1};
  bench_parse(argc, argv, &a, usage);
  if (a.n < 1) bench_die("-n must be at least 1");
  long rounds = a.iters / a.threads > 0 ? a.iters / a.threads : 1;
  pthread_barrier_t phase;
  pthread_barrier_init(&phase, NULL, (unsigned)a.threads);
  worker_t *ws = calloc((size_t)a.threads, sizeof(*ws));
  pthread_t *tids = calloc((size_t)a.threads, sizeof(*tids));
  if (ws == NULL || tids == NULL) bench_die("out of memory");
  for (int t = 0; t < a.threads; t++)
    ws[t] = (worker_t){a.n, rounds, a.seed * 1000003u + (uint64_t)t, 0, &phase};
  bench_spawn(tids, a.threads, worker, ws, sizeof(*ws), NULL, 0);
  bench_join(tids, a.threads);
  double secs = 0;
  for (int t = 0; t < a.threads; t++)
    secs += ws[t].free_secs / a.threads;
  printf("RESULT scatter time=%.4f threads=%d rounds=%ld blocks=%ld mfrees_per_s=%.2f\n", secs,
         a.threads, rounds, a.n, (double)rounds * a.n * a.threads / secs / 1e6);
  pthread_barrier_destroy(&phase);
  free(ws);
  free(tids);
  return 0;
}
