/*
 * threadchurn: every thread allocates and frees small blocks of its own, nothing shared.
 *
 * Models the per-thread churn of glibc's bench-malloc-thread (written anew here): each of T
 * threads keeps SLOTS slots; one operation picks a random slot, checks and frees the block in it
 * (if any) and allocates a new one of a random small size (log-uniform 8..SIZE_MAX_), writing its
 * pattern. No block ever crosses threads, so the time is the allocator's per-thread fast and slow
 * paths and whatever it shares between threads behind them (a global lock, a shared arena, a
 * cache line). -i is the total number of operations, shared equally by the threads, so the time
 * at 2, 8 or 64 threads is for the same amount of work.
 *
 *   threadchurn [-t threads] [-i ops] [-n slots per thread] [-s seed]
 */
#include "bench.h"

#define SIZE_MIN 8
#define SIZE_MAX_ 512

static const char usage[] =
    "threadchurn: each thread frees and allocates random small blocks of its own\n"
    "  -t threads (default 2)   -i total operations (default 8000000)\n"
    "  -n slots per thread (default 1024)   -s seed\n";

typedef struct {
  long ops;      /* operations this thread does */
  long nslots;   /* slots it keeps */
  uint64_t seed; /* of its random numbers */
  char pad[BENCH_LINE];
} job_t;

static void *worker(void *arg) {
  job_t *j = arg;
  bench_rng_t r;
  bench_rng_init(&r, j->seed, 7);
  bench_block_t *slot = calloc((size_t)j->nslots, sizeof(*slot));
  if (slot == NULL) bench_die("out of memory");
  for (long k = 0; k < j->ops; k++) {
    bench_block_t *b = &slot[bench_below(&r, (uint64_t)j->nslots)];
    if (b->p != NULL) bench_block_drop(b, "threadchurn");
    bench_block_new(b, bench_logsize(&r, SIZE_MIN, SIZE_MAX_), &r);
  }
  for (long i = 0; i < j->nslots; i++)
    if (slot[i].p != NULL) bench_block_drop(&slot[i], "threadchurn");
  free(slot);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 8000000, .seed = 1, .n = 1024};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1) bench_die("-n must be >= 1");
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  long per = a.iters / t;
  for (int i = 0; i < t; i++) {
    jobs[i].ops = per;
    jobs[i].nslots = a.n;
    jobs[i].seed = a.seed * 1000003u + (uint64_t)i;
  }
  double t0 = bench_now();
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  bench_join(tids, t);
  double secs = bench_now() - t0;
  double ops = (double)per * t;
  printf("RESULT threadchurn time=%.4f threads=%d ops=%.0f mops_per_s=%.2f\n", secs, t, ops,
         ops / secs / 1e6);
  free(jobs);
  free(tids);
  return 0;
}
