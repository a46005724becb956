/*
 * idle: many threads, mostly asleep, each holding a small working set.
 *
 * Models a thread-per-connection server or a big thread pool (hundreds to thousands of threads,
 * few running at once). Allocators with per-thread caches pay for each thread's cache, partly
 * filled slabs and metadata even while the thread sleeps; per-CPU caches bound that by the CPU
 * count. The run:
 *   1. The main thread, which has already used malloc, reads the RSS baseline (program,
 *      allocator start-up); T threads (-t, e.g. 256 or 1024) start with small stacks and wait.
 *   2. Each thread allocates a working set of -n blocks (log-uniform 16..1024 bytes), then for -i
 *      rounds replaces a quarter of them and sleeps SLEEP_US: it is mostly idle.
 *   3. All threads wait, holding their working sets; the main thread reads RSS again.
 * Reported: rss_over_live = (RSS in step 3 - baseline) / live bytes (the excess over 1.0 is the
 * threads' stacks, the same for every allocator - stack_kib, RSS added by starting them, shows
 * it - and the allocator's per-thread caches, metadata and fragmentation); heap_over_live, the
 * same without the stacks: the threads run on stacks mapped here, whose resident pages
 * (mincore, stacks_kib) are subtracted, so it is what the allocator holds over live bytes; and
 * time for step 2.
 * The baseline is taken before the threads start: an allocator that sets a thread up when it is
 * created, rather than at its first allocation, pays for that too.
 * Blocks are checked when replaced and at the end.
 *
 *   idle [-t threads] [-i rounds] [-n blocks per thread] [-s seed]
 */
#include "bench.h"

#include <stdatomic.h>
#include <sys/mman.h>

#define SIZE_MIN 16
#define SIZE_MAX_ 1024
#define SLEEP_US 1000 /* between rounds: the thread is idle most of the time */
#define STACK (128 * 1024)

static const char usage[] =
    "idle: many mostly idle threads each holding a small working set; RSS / live bytes\n"
    "  -t threads (default 256)   -i rounds of work per thread (default 20)\n"
    "  -n blocks per thread (default 64)   -s seed\n";

typedef struct {
  long rounds, nblocks;
  uint64_t seed;
  size_t live; /* bytes held at the end of step 2; read by main after the barrier */
  char pad[BENCH_LINE];
} job_t;

static pthread_barrier_t b_started, b_go, b_held, b_done;

static void *worker(void *arg) {
  job_t *j = arg;
  bench_rng_t r;
  bench_rng_init(&r, j->seed, 6);
  void **blk = alloca((size_t)j->nblocks * sizeof(void *));
  size_t *sz = alloca((size_t)j->nblocks * sizeof(size_t));
  pthread_barrier_wait(&b_started);
  pthread_barrier_wait(&b_go);
  size_t live = 0;
  for (long i = 0; i < j->nblocks; i++) {
    sz[i] = bench_logsize(&r, SIZE_MIN, SIZE_MAX_);
    blk[i] = bench_xmalloc(sz[i]);
    bench_fill(blk[i], sz[i], j->seed ^ (uint64_t)i);
    live += sz[i];
  }
  for (long k = 0; k < j->rounds; k++) {
    for (long q = 0; q < (j->nblocks + 3) / 4; q++) {
      long i = (long)bench_below(&r, (uint64_t)j->nblocks);
      bench_check(blk[i], sz[i], j->seed ^ (uint64_t)i, "idle");
      free(blk[i]);
      live -= sz[i];
      sz[i] = bench_logsize(&r, SIZE_MIN, SIZE_MAX_);
      blk[i] = bench_xmalloc(sz[i]);
      bench_fill(blk[i], sz[i], j->seed ^ (uint64_t)i);
      live += sz[i];
    }
    usleep(SLEEP_US);
  }
  j->live = live;
  pthread_barrier_wait(&b_held);
  pthread_barrier_wait(&b_done);
  for (long i = 0; i < j->nblocks; i++) {
    bench_check(blk[i], sz[i], j->seed ^ (uint64_t)i, "idle");
    free(blk[i]);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 256, .iters = 20, .seed = 1, .n = 64};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1 || a.n > 2048) bench_die("-n must be in 1..2048");
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  for (int i = 0; i < t; i++) {
    jobs[i].rounds = a.iters;
    jobs[i].nblocks = a.n;
    jobs[i].seed = a.seed * 1000003u + (uint64_t)i;
  }
  pthread_barrier_init(&b_started, NULL, (unsigned)t + 1);
  pthread_barrier_init(&b_go, NULL, (unsigned)t + 1);
  pthread_barrier_init(&b_held, NULL, (unsigned)t + 1);
  pthread_barrier_init(&b_done, NULL, (unsigned)t + 1);
  /* the threads' stacks (glibc puts its thread descriptor and TLS there too), ours to count */
  size_t stacks_len = (size_t)t * STACK, pages = stacks_len / (size_t)getpagesize();
  char *stacks = mmap(NULL, stacks_len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  unsigned char *in_core = calloc(pages, 1);
  if (stacks == MAP_FAILED || in_core == NULL) bench_die("no memory for %d stacks", t);

  size_t base = bench_rss(); /* before the threads: their start-up costs count */
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), stacks, STACK);
  pthread_barrier_wait(&b_started);
  size_t started = bench_rss();
  double t0 = bench_now();
  pthread_barrier_wait(&b_go);
  pthread_barrier_wait(&b_held);
  double secs = bench_now() - t0;
  size_t held = bench_rss(), stacks_res = 0;
  if (mincore(stacks, stacks_len, in_core) != 0) bench_die("mincore: %s", strerror(errno));
  for (size_t i = 0; i < pages; i++)
    stacks_res += (in_core[i] & 1) * (size_t)getpagesize();
  size_t live = 0;
  for (int i = 0; i < t; i++)
    live += jobs[i].live;
  pthread_barrier_wait(&b_done);
  bench_join(tids, t);

  double ratio = (double)(held > base ? held - base : 0) / (double)live;
  double heap = (double)(held > base + stacks_res ? held - base - stacks_res : 0) / (double)live;
  printf("RESULT idle time=%.4f threads=%d live_kib=%zu rss_base_kib=%zu stack_kib=%zu "
         "stacks_kib=%zu rss_held_kib=%zu rss_over_live=%.3f heap_over_live=%.3f\n",
         secs, t, live / 1024, base / 1024, (started > base ? started - base : 0) / 1024,
         stacks_res / 1024, held / 1024, ratio, heap);
  munmap(stacks, stacks_len);
  free(in_core);
  free(jobs);
  free(tids);
  return 0;
}
