/*
 * falseshare: does the allocator put small blocks used by different threads in one cache line?
 *
 * Two modes, modelled on the cache-thrash and cache-scratch tests described in the Hoard paper
 * (Berger et al., ASPLOS 2000):
 *   thrash   (active false sharing) each thread repeatedly allocates a small block, writes every
 *            byte of it REPS times, checks it and frees it. An allocator that carves consecutive
 *            small blocks for different threads out of one cache line makes the threads' writes
 *            fight over that line.
 *   scratch  (passive false sharing) the main thread allocates one small block per thread, next to
 *            each other, and hands block i to thread i, which writes it, frees it (a cross-thread
 *            free) and then runs the thrash loop. An allocator that gives a freed block back to the
 *            thread that freed it hands each thread a block sharing a line with its neighbours'.
 * With no false sharing the loop runs at L1 speed; with it, every write is a cache-line transfer,
 * easily 20-100x slower. -i is the total number of blocks, shared by the threads.
 *
 *   falseshare -m thrash|scratch [-t threads] [-i blocks] [-n block size] [-s seed]
 */
#include "bench.h"

#define REPS 100 /* times each byte of a block is written before it is freed */

static const char usage[] =
    "falseshare: small blocks written by several threads (Hoard's cache-thrash/cache-scratch)\n"
    "  -m thrash|scratch (default thrash)   -t threads (default 2)\n"
    "  -i total blocks (default 400000)   -n block size (default 8)   -s seed (unused)\n";

typedef struct {
  long count;               /* blocks to allocate, write and free */
  size_t size;              /* block size */
  unsigned char *given;     /* scratch: block allocated by main, written then freed here */
  pthread_barrier_t *start; /* all threads begin together, so they overlap */
  char pad[BENCH_LINE];
} job_t;

static void write_block(unsigned char *p, size_t size, const char *what) {
  volatile unsigned char *v = p;
  for (size_t j = 0; j < size; j++)
    v[j] = 0;
  for (int r = 0; r < REPS; r++)
    for (size_t j = 0; j < size; j++)
      v[j]++;
  for (size_t j = 0; j < size; j++)
    if (v[j] != (unsigned char)REPS)
      bench_fail("falseshare %s: byte %zu of block %p is %u, expected %u", what, j, (void *)p, v[j],
                 (unsigned)REPS);
}

static void *worker(void *arg) {
  job_t *j = arg;
  pthread_barrier_wait(j->start);
  if (j->given != NULL) {
    write_block(j->given, j->size, "scratch");
    free(j->given);
  }
  for (long i = 0; i < j->count; i++) {
    unsigned char *p = malloc(j->size);
    if (p == NULL) bench_die("malloc(%zu) returned NULL", j->size);
    write_block(p, j->size, "thrash");
    free(p);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 400000, .seed = 1, .mode = "thrash", .n = 8};
  bench_parse(argc, argv, &a, usage);
  int scratch;
  if (strcmp(a.mode, "thrash") == 0)
    scratch = 0;
  else if (strcmp(a.mode, "scratch") == 0)
    scratch = 1;
  else
    bench_die("unknown mode %s (thrash or scratch)", a.mode);
  if (a.n < 1) bench_die("-n must be >= 1");
  int t = a.threads;

  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  pthread_barrier_t start;
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  pthread_barrier_init(&start, NULL, (unsigned)t + 1);
  for (int i = 0; i < t; i++) {
    jobs[i].count = a.iters / t;
    jobs[i].size = (size_t)a.n;
    jobs[i].start = &start;
    if (scratch) jobs[i].given = bench_xmalloc((size_t)a.n);
  }
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  double t0 = bench_now();
  pthread_barrier_wait(&start);
  bench_join(tids, t);
  double secs = bench_now() - t0;

  double blocks = (double)(a.iters / t) * t;
  printf("RESULT falseshare time=%.4f mode=%s threads=%d size=%ld blocks=%.0f "
         "mwrites_per_s=%.1f\n",
         secs, a.mode, t, a.n, blocks, blocks * REPS * (double)a.n / secs / 1e6);
  pthread_barrier_destroy(&start);
  free(jobs);
  free(tids);
  return 0;
}
