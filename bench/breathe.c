/*
 * breathe: a server whose heap breathes: it grows to a peak, shrinks to a tenth, grows again.
 *
 * Models a service with daily load: by day its heap fills with small objects (sessions,
 * records: 16..1024 bytes) and some large buffers (256 KiB..2 MiB, about a third of the
 * bytes); at night nine in ten sessions, picked at random, end and their objects are freed.
 * A session is SESSION objects allocated one after another (objects of a request or a
 * connection live and die together), so the survivors keep some pages and huge pages whole
 * and leave others empty, for the allocator to return; objects freed one by one at random
 * would leave a survivor on nearly every page, which no allocator that does not move objects
 * can give back. Minutes of such cycles are compressed into seconds. The run:
 *   1. T worker threads each hold a share of the peak (-n MiB in all). A cycle: allocate
 *      (writing every byte) until the share is reached, then end each session but one in
 *      KEEP_ONE_IN at random. -i cycles; the workers start each growth and each shrink
 *      together, so that the heap as a whole breathes. The array of blocks counts as live.
 *   2. The workers stay alive, idle, while the main thread idles -w seconds (long enough for a
 *      background purge, as magpie's reaper's, to run), then they check and free what is left.
 * The main thread samples RSS and live bytes every SAMPLE_MS throughout.
 * Reported: time (step 1, until the last worker ends it), peak_rss_kib (the highest sample),
 * live_peak_kib, live_kept_kib, after_shrink (RSS over live bytes, as bench_rss_ratio, when
 * step 1 ends) and idle_ratio (the same after the idle period: the number to watch).
 * With -m FILE the samples are written to FILE as CSV: seconds, live bytes, RSS bytes.
 *
 *   breathe [-t threads] [-i cycles] [-n peak MiB] [-w idle seconds] [-s seed] [-m samples.csv]
 */
#include "bench.h"

#include <stdatomic.h>

#define SAMPLE_MS 50
#define KEEP_ONE_IN 10
#define SESSION 1024 /* objects: about 250 KiB */
#define SMALL_MIN 16
#define SMALL_MAX 1024
#define LARGE_ONE_IN 8192 /* a large block in this many: about a third of the bytes */
#define LARGE_MIN ((size_t)256 << 10)
#define LARGE_MAX ((size_t)2 << 20)

static const char usage[] =
    "breathe: the heap grows to a peak, shrinks to a tenth, grows again; then idles\n"
    "  -t threads (default 2)   -i cycles (default 3)   -n peak MiB (default 512)\n"
    "  -w idle seconds (default 5)   -s seed   -m FILE write RSS/live samples as CSV\n";

typedef struct {
  long cycles;
  size_t budget; /* the peak live bytes of this worker */
  uint64_t seed;
  pthread_barrier_t *step;      /* the workers grow together and shrink together */
  pthread_barrier_t *idle_over; /* the workers and the main thread, at the end of the idle */
  _Atomic size_t live;          /* written by the worker, read by the sampler */
  _Atomic int idle;             /* 1 once step 1 is over */
  double done;                  /* bench_now() at the end of step 1; read once idle is 1 */
  char pad[BENCH_LINE];
} worker_t;

/* A block of the mix, every byte written. */
static void new_block(bench_block_t *b, bench_rng_t *r) {
  size_t size = bench_below(r, LARGE_ONE_IN) == 0 ? bench_range(r, LARGE_MIN, LARGE_MAX)
                                                  : bench_logsize(r, SMALL_MIN, SMALL_MAX);
  bench_block_new(b, size, r);
  if (size > 9) memset((char *)b->p + 8, 0x5a, size - 9); /* between the pattern's ends */
}

static void *worker(void *arg) {
  worker_t *w = arg;
  bench_rng_t r;
  bench_rng_init(&r, w->seed, 7);
  size_t cap = 4096, n = 0, live = cap * sizeof(bench_block_t);
  bench_block_t *set = malloc(cap * sizeof(bench_block_t));
  if (set == NULL) bench_die("out of memory");
  for (long c = 0; c < w->cycles; c++) {
    pthread_barrier_wait(w->step);
    for (size_t k = 0; live < w->budget; k++) {
      if (n == cap) {
        live += cap * sizeof(bench_block_t);
        cap *= 2;
        set = realloc(set, cap * sizeof(bench_block_t));
        if (set == NULL) bench_die("out of memory");
      }
      new_block(&set[n], &r);
      live += set[n++].size;
      if ((k & 255) == 0) atomic_store_explicit(&w->live, live, memory_order_relaxed);
    }
    pthread_barrier_wait(w->step);
    size_t kept = 0;
    for (size_t i = 0, keep = 0; i < n; i++) {
      if (i % SESSION == 0) keep = bench_below(&r, KEEP_ONE_IN) == 0;
      if (keep) {
        set[kept++] = set[i];
      } else {
        live -= set[i].size;
        bench_block_drop(&set[i], "breathe");
      }
      if ((i & 255) == 0) atomic_store_explicit(&w->live, live, memory_order_relaxed);
    }
    n = kept;
    live -= cap * sizeof(bench_block_t);
    cap = n > 2048 ? 2 * n : 4096; /* the array shrinks with the heap */
    set = realloc(set, cap * sizeof(bench_block_t));
    if (set == NULL) bench_die("out of memory");
    live += cap * sizeof(bench_block_t);
    atomic_store_explicit(&w->live, live, memory_order_relaxed);
  }
  w->done = bench_now();
  atomic_store_explicit(&w->idle, 1, memory_order_release);
  pthread_barrier_wait(w->idle_over);
  for (size_t i = 0; i < n; i++)
    bench_block_drop(&set[i], "breathe");
  free(set);
  return NULL;
}

static size_t total_live(worker_t *w, int t, int *idle) {
  size_t s = 0;
  *idle = 1;
  for (int i = 0; i < t; i++) {
    s += atomic_load_explicit(&w[i].live, memory_order_relaxed);
    *idle &= atomic_load_explicit(&w[i].idle, memory_order_acquire);
  }
  return s;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 3, .seed = 1, .n = 512, .wait = 5.0};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1 || a.iters < 1) bench_die("-n and -i must be >= 1");
  worker_t *w = calloc((size_t)t, sizeof(*w));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (w == NULL || tids == NULL) bench_die("out of memory");
  pthread_barrier_t step, idle_over;
  pthread_barrier_init(&step, NULL, (unsigned)t);
  pthread_barrier_init(&idle_over, NULL, (unsigned)t + 1);
  for (int i = 0; i < t; i++) {
    w[i].cycles = a.iters;
    w[i].budget = ((size_t)a.n << 20) / (size_t)t;
    w[i].seed = a.seed * 1000003u + (uint64_t)i;
    w[i].step = &step;
    w[i].idle_over = &idle_over;
  }
  bench_series_t samples;
  bench_series_init(&samples);
  size_t base = bench_rss(), peak_rss = base, peak_live = 0, live;
  int idle = 0;

  double t0 = bench_now();
  bench_spawn(tids, t, worker, w, sizeof(*w), NULL, 0);
  while (!idle) {
    bench_nap(SAMPLE_MS * 1e-3);
    live = total_live(w, t, &idle);
    size_t rss = bench_rss();
    bench_series_add(&samples, bench_now() - t0, live, rss);
    peak_rss = rss > peak_rss ? rss : peak_rss;
    peak_live = live > peak_live ? live : peak_live;
  }
  double secs = 0; /* the last worker's end of step 1: the sampler's naps must not count */
  for (int i = 0; i < t; i++)
    secs = w[i].done - t0 > secs ? w[i].done - t0 : secs;
  double after_shrink = bench_rss_ratio(bench_rss(), base, live);

  double idle_end = bench_now() + a.wait;
  for (double left; (left = idle_end - bench_now()) > 0;) {
    bench_nap(left < SAMPLE_MS * 1e-3 ? left : SAMPLE_MS * 1e-3);
    bench_series_add(&samples, bench_now() - t0, live, bench_rss());
  }
  size_t rss_idle = bench_rss();
  double idle_ratio = bench_rss_ratio(rss_idle, base, live);
  pthread_barrier_wait(&idle_over);
  bench_join(tids, t);
  pthread_barrier_destroy(&step);
  pthread_barrier_destroy(&idle_over);

  long ns = samples.n;
  bench_series_finish(&samples, a.mode);
  printf("RESULT breathe time=%.4f threads=%d cycles=%ld peak_mib=%ld peak_rss_kib=%zu "
         "live_peak_kib=%zu live_kept_kib=%zu after_shrink=%.3f idle_ratio=%.3f "
         "rss_idle_kib=%zu samples=%ld\n",
         secs, t, a.iters, a.n, peak_rss / 1024, peak_live / 1024, live / 1024, after_shrink,
         idle_ratio, rss_idle / 1024, ns);
  free(w);
  free(tids);
  return 0;
}
