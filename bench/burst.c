/*
 * burst: does memory go back to the OS once a burst of allocations is freed and the program idles?
 *
 * Models a service whose steady data is small and which now and then handles a burst (a big
 * request, a batch job) that needs many times that memory for a moment:
 *   1. The main thread allocates the steady live set (-n MiB of blocks of 16..4096 bytes) and
 *      keeps it to the end; RSS is read before (the baseline) and after.
 *   2. T threads (-t) together allocate a burst of BURST_FACTOR times the live set in blocks of
 *      16 bytes..256 KiB, interleaved with replacing some steady blocks (so burst and steady
 *      blocks share slabs and pages, as they do in a real program), hold it, and free it all.
 *   3. The threads stay alive but idle; the main thread samples RSS every SAMPLE_MS for -w
 *      seconds (default 5).
 * Reported: time (step 2), peak_ratio (RSS over live at the burst's height), after_free (just
 * after the burst is freed) and idle_ratio (after the wait), each (RSS - baseline) / live bytes.
 * idle_ratio is the number that says whether the burst's memory went back.
 *
 *   burst [-t threads] [-n live MiB] [-w idle seconds] [-s seed]
 */
#include "bench.h"

#define BURST_FACTOR 16
#define SAMPLE_MS 100
#define STEADY_MIN 16
#define STEADY_MAX 4096
#define BURST_MIN 16
#define BURST_MAX (256 * 1024)
#define STEADY_EVERY 64 /* burst blocks per replaced steady block */

static const char usage[] =
    "burst: a steady live set, a burst 16x its size allocated and freed, then idle; RSS / live\n"
    "  -t threads (default 2)   -n live MiB (default 16)   -w idle seconds (default 5)   -s seed\n";

typedef struct {
  void **blocks; /* block i carries the tag base ^ i (bench_fill) */
  size_t *sizes;
  size_t count, cap;
} set_t;

typedef struct {
  size_t burst;   /* bytes of burst this thread allocates */
  set_t *steady;  /* shared steady set; this thread replaces the slots i % threads == index */
  int index, threads;
  uint64_t seed;
  pthread_barrier_t *held, *freed, *done;
  char pad[BENCH_LINE];
} job_t;

/* Appends a new block of size bytes to s and returns it, unfilled. */
static void *set_add(set_t *s, size_t size) {
  if (s->count == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    if (!(s->blocks = realloc(s->blocks, s->cap * sizeof(void *))) ||
        !(s->sizes = realloc(s->sizes, s->cap * sizeof(size_t))))
      bench_die("out of memory");
  }
  s->sizes[s->count] = size;
  return s->blocks[s->count++] = bench_xmalloc(size);
}

/* Checks and frees every block of s (tags base ^ i), then its arrays. */
static void set_free(set_t *s, uint64_t base, const char *what) {
  for (size_t i = 0; i < s->count; i++) {
    bench_check(s->blocks[i], s->sizes[i], base ^ i, what);
    free(s->blocks[i]);
  }
  free(s->blocks);
  free(s->sizes);
  *s = (set_t){0};
}

static void set_fill(set_t *s, size_t bytes, bench_rng_t *r) {
  for (size_t live = 0; live < bytes;) {
    size_t sz = bench_logsize(r, STEADY_MIN, STEADY_MAX);
    void *b = set_add(s, sz);
    bench_fill(b, sz, (uint64_t)(s->count - 1));
    live += sz;
  }
}

static void *worker(void *arg) {
  job_t *j = arg;
  bench_rng_t r;
  bench_rng_init(&r, j->seed, 8);
  set_t burst = {0}, *s = j->steady;
  for (size_t bytes = 0; bytes < j->burst;) {
    size_t sz = bench_logsize(&r, BURST_MIN, BURST_MAX);
    void *b = set_add(&burst, sz);
    memset(b, 0x5b, sz); /* a burst uses its memory: every page resident */
    bench_fill(b, sz, j->seed ^ (burst.count - 1));
    bytes += sz;
    if (burst.count % STEADY_EVERY == 0) { /* replace one of this thread's steady blocks, same size */
      size_t i = (size_t)bench_below(&r, s->count / (size_t)j->threads) * (size_t)j->threads +
                 (size_t)j->index;
      bench_check(s->blocks[i], s->sizes[i], (uint64_t)i, "burst steady");
      free(s->blocks[i]);
      s->blocks[i] = bench_xmalloc(s->sizes[i]);
      bench_fill(s->blocks[i], s->sizes[i], (uint64_t)i);
    }
  }
  pthread_barrier_wait(j->held);
  set_free(&burst, j->seed, "burst");
  pthread_barrier_wait(j->freed);
  pthread_barrier_wait(j->done); /* alive and idle while the main thread watches RSS */
  return NULL;
}

static double ratio(size_t rss, size_t base, size_t live) {
  return (double)(rss > base ? rss - base : 0) / (double)live;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 0, .seed = 1, .n = 16, .wait = 5};
  bench_parse(argc, argv, &a, usage);
  if (a.n < 1) bench_die("-n must be >= 1");
  int t = a.threads;
  bench_rng_t r;
  bench_rng_init(&r, a.seed, 9);
  size_t base = bench_rss();
  set_t steady = {0};
  set_fill(&steady, (size_t)a.n << 20, &r);
  if (steady.count < (size_t)t) bench_die("-n too small for %d threads", t);
  size_t live = 0;
  for (size_t i = 0; i < steady.count; i++)
    live += steady.sizes[i];

  pthread_barrier_t held, freed, done;
  pthread_barrier_init(&held, NULL, (unsigned)t + 1);
  pthread_barrier_init(&freed, NULL, (unsigned)t + 1);
  pthread_barrier_init(&done, NULL, (unsigned)t + 1);
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  for (int i = 0; i < t; i++)
    jobs[i] = (job_t){.burst = (live * BURST_FACTOR) / (size_t)t, .steady = &steady, .index = i,
                      .threads = t, .seed = a.seed * 7919u + (uint64_t)i, .held = &held,
                      .freed = &freed, .done = &done};
  double t0 = bench_now();
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  pthread_barrier_wait(&held);
  size_t peak = bench_rss();
  pthread_barrier_wait(&freed);
  double secs = bench_now() - t0;
  size_t after = bench_rss(), rss = after;
  for (double waited = 0; waited < a.wait; waited += SAMPLE_MS / 1000.0) {
    usleep(SAMPLE_MS * 1000);
    rss = bench_rss();
  }
  pthread_barrier_wait(&done);
  bench_join(tids, t);
  set_free(&steady, 0, "burst steady");
  printf("RESULT burst time=%.4f threads=%d live_kib=%zu peak_ratio=%.3f after_free=%.3f "
         "idle_ratio=%.3f rss_idle_kib=%zu\n",
         secs, t, live / 1024, ratio(peak, base, live), ratio(after, base, live),
         ratio(rss, base, live), rss / 1024);
  free(jobs);
  free(tids);
  return 0;
}
