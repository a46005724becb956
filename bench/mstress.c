/*
 * mstress: blocks of mixed lifetimes, threads started and joined in rounds.
 *
 * Models a program whose threads come and go (a pool that is torn down and rebuilt, a batch of
 * tasks per request) while some of its data outlives them; written after the description of
 * mimalloc-bench's mstress, not from its code. The run is ROUNDS rounds; each round starts T
 * threads and joins them all. A thread keeps LOCAL slots of its own; one operation replaces the
 * block in a random local slot with a new one, and one operation in TRANSFER_ONE_IN instead
 * swaps a new block into a random slot of a shared transfer array, taking out (and later freeing)
 * whatever an earlier thread, maybe of an earlier round, left there. Sizes are log-uniform
 * 8..1024 bytes, with one block in LARGE_ONE_IN of 1..64 KiB. So blocks live for a few operations
 * (local), a thread's life (what is left in its slots when it exits is freed then), or several
 * rounds (transfer), and the allocator sees hundreds of threads start and exit.
 * -i is the total number of operations, shared equally by the threads of all rounds.
 *
 *   mstress [-t threads] [-i ops] [-n local slots per thread] [-s seed]
 */
#include "bench.h"

#include <stdatomic.h>

#define ROUNDS 10
#define TRANSFER_ONE_IN 8 /* one operation in this many goes through the transfer array */
#define TRANSFER_PER_THREAD 512
#define LARGE_ONE_IN 100 /* one block in this many is large */
#define SIZE_MIN 8
#define SIZE_MAX_ 1024
#define LARGE_MIN 1024
#define LARGE_MAX 65536

static const char usage[] =
    "mstress: threads started and joined in rounds, blocks of mixed lifetimes\n"
    "  -t threads (default 2)   -i total operations (default 4000000)\n"
    "  -n local slots per thread (default 256)   -s seed\n";

typedef struct {
  long ops;
  long nlocal;
  uint64_t seed;
  char pad[BENCH_LINE];
} job_t;

static _Atomic(void *) *transfer;
static long ntransfer;

/* A block tagged with its size (bench_tagged_fill). */
static void *make_block(bench_rng_t *r) {
  size_t sz = bench_below(r, LARGE_ONE_IN) == 0 ? bench_logsize(r, LARGE_MIN, LARGE_MAX)
                                                : bench_logsize(r, SIZE_MIN, SIZE_MAX_);
  void *b = malloc(sz);
  if (b == NULL) bench_die("malloc(%zu) returned NULL", sz);
  bench_tagged_fill(b, sz, r);
  return b;
}

static void drop_block(void *b) {
  bench_tagged_check(b, SIZE_MIN, LARGE_MAX, "mstress");
  free(b);
}

static void *worker(void *arg) {
  job_t *j = arg;
  bench_rng_t r;
  bench_rng_init(&r, j->seed, 11);
  void **local = calloc((size_t)j->nlocal, sizeof(void *));
  if (local == NULL) bench_die("out of memory");
  for (long k = 0; k < j->ops; k++) {
    void *p = make_block(&r);
    if (bench_below(&r, TRANSFER_ONE_IN) == 0) {
      long i = (long)bench_below(&r, (uint64_t)ntransfer);
      p = atomic_exchange_explicit(&transfer[i], p, memory_order_acq_rel);
      if (p != NULL) drop_block(p);
    } else {
      void **s = &local[bench_below(&r, (uint64_t)j->nlocal)];
      if (*s != NULL) drop_block(*s);
      *s = p;
    }
  }
  for (long i = 0; i < j->nlocal; i++)
    if (local[i] != NULL) drop_block(local[i]);
  free(local);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 4000000, .seed = 1, .n = 256};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1) bench_die("-n must be >= 1");
  ntransfer = (long)t * TRANSFER_PER_THREAD;
  transfer = calloc((size_t)ntransfer, sizeof(*transfer));
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (transfer == NULL || jobs == NULL || tids == NULL) bench_die("out of memory");
  long per = a.iters / ((long)t * ROUNDS);
  if (per < 1) per = 1;
  double t0 = bench_now();
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < t; i++) {
      jobs[i].ops = per;
      jobs[i].nlocal = a.n;
      jobs[i].seed = a.seed * 1000003u + (uint64_t)round * 7919u + (uint64_t)i;
    }
    bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
    bench_join(tids, t);
  }
  double secs = bench_now() - t0;
  for (long i = 0; i < ntransfer; i++) {
    void *p = atomic_load(&transfer[i]);
    if (p != NULL) drop_block(p);
  }
  double ops = (double)per * t * ROUNDS;
  printf("RESULT mstress time=%.4f threads=%d rounds=%d ops=%.0f mops_per_s=%.2f\n", secs, t,
         ROUNDS, ops, ops / secs / 1e6);
  free(transfer);
  free(jobs);
  free(tids);
  return 0;
}
