/*
 * server: a long-running server whose size mix changes, then goes quiet.
 *
 * Models a service that lives for days: its request mix shifts (small session objects, then
 * medium buffers, then large ones, then small again), its live data stays roughly constant, and
 * at night most of its data is dropped and it idles. Memory that an allocator keeps in caches,
 * in slabs of a size class no longer used, or in freed pages it never returns, shows up as RSS
 * far above the live bytes. The run:
 *   1. T worker threads each keep a share of a live-byte budget (-n MiB in all) in a set of
 *      blocks; one operation frees a random block and allocates one drawn from the current
 *      phase's size range. The -i operations go through PHASES phases (size ranges below).
 *      The main thread samples RSS and live bytes every SAMPLE_MS and records the ratios.
 *   2. Each worker frees all but one block in KEEP_ONE_IN and waits, alive but idle.
 *   3. The main thread idles -w seconds (default 5), then reads RSS.
 * Reported: time (step 1, until the last worker ends it; taken by the workers, so it is not
 * rounded up to the sampler's SAMPLE_MS naps, as it was until 2026-11-22 21:00), peak_ratio
 * and mean_ratio of (RSS - RSS at start) / live bytes during phase 1, after_free (the same
 * ratio just after step 2) and idle_ratio (after step 3), the number that shows whether memory
 * goes back to the OS once a server quiets down.
 * With -m FILE the samples (phase 1 and the idle period) are written to FILE as CSV: seconds,
 * live bytes, RSS bytes.
 *
 *   server [-t threads] [-i ops] [-n live MiB] [-w idle seconds] [-s seed] [-m samples.csv]
 */
#include "bench.h"

#include <stdatomic.h>

#define PHASES 5
#define SAMPLE_MS 50
#define KEEP_ONE_IN 10 /* blocks kept through the idle period: one in this many */

/* Size range of each phase: small, medium, large, mixed, small again. */
static const size_t phase_lo[PHASES] = {16, 256, 8192, 16, 16};
static const size_t phase_hi[PHASES] = {128, 4096, 262144, 16384, 256};

static const char usage[] =
    "server: long-running threads with a changing size mix; then free most and idle\n"
    "  -t threads (default 2)   -i total operations (default 4000000)\n"
    "  -n live MiB (default 64)   -w idle seconds (default 5)   -s seed\n"
    "  -m FILE write RSS/live samples as CSV\n";

typedef struct {
  long ops;      /* operations in each phase */
  size_t budget; /* live bytes this worker keeps */
  uint64_t seed;
  _Atomic size_t live; /* live bytes, written by the worker, read by the sampler */
  _Atomic int phase;   /* phase the worker is in; PHASES after step 2 */
  double done;         /* bench_now() at the end of its step 1; read after phase is PHASES */
  char pad[BENCH_LINE];
} worker_t;

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int idle_over; /* protected by idle_lock */

static void *worker(void *arg) {
  worker_t *w = arg;
  bench_rng_t r;
  bench_rng_init(&r, w->seed, 5);
  size_t cap = 1024, n = 0, live = 0;
  bench_block_t *set = bench_xmalloc(cap * sizeof(*set));
  for (int ph = 0; ph < PHASES; ph++) {
    atomic_store_explicit(&w->phase, ph, memory_order_relaxed);
    for (long k = 0; k < w->ops; k++) {
      /* Replace a random block, then top the set up to the budget (or trim it down to it). */
      if (n > 0) {
        size_t i = (size_t)bench_below(&r, n);
        live -= set[i].size;
        bench_block_drop(&set[i], "server");
        set[i] = set[--n];
      }
      do {
        if (n == cap) {
          cap *= 2;
          set = realloc(set, cap * sizeof(*set));
          if (set == NULL) bench_die("out of memory");
        }
        bench_block_new(&set[n], bench_logsize(&r, phase_lo[ph], phase_hi[ph]), &r);
        live += set[n++].size;
      } while (live < w->budget);
      while (live > w->budget + phase_hi[ph] && n > 1) {
        size_t i = (size_t)bench_below(&r, n);
        live -= set[i].size;
        bench_block_drop(&set[i], "server");
        set[i] = set[--n];
      }
      if ((k & 255) == 0) atomic_store_explicit(&w->live, live, memory_order_relaxed);
    }
  }
  w->done = bench_now();
  /* Step 2: keep one block in KEEP_ONE_IN. */
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % KEEP_ONE_IN == 0)
      set[kept++] = set[i];
    else {
      live -= set[i].size;
      bench_block_drop(&set[i], "server");
    }
  }
  n = kept;
  atomic_store_explicit(&w->live, live, memory_order_relaxed);
  atomic_store_explicit(&w->phase, PHASES, memory_order_release);
  pthread_mutex_lock(&idle_lock);
  while (!idle_over)
    pthread_cond_wait(&idle_cond, &idle_lock);
  pthread_mutex_unlock(&idle_lock);
  for (size_t i = 0; i < n; i++)
    bench_block_drop(&set[i], "server");
  free(set);
  return NULL;
}

static size_t total_live(worker_t *w, int t) {
  size_t s = 0;
  for (int i = 0; i < t; i++)
    s += atomic_load_explicit(&w[i].live, memory_order_relaxed);
  return s;
}

static int all_idle(worker_t *w, int t) {
  for (int i = 0; i < t; i++)
    if (atomic_load_explicit(&w[i].phase, memory_order_acquire) != PHASES) return 0;
  return 1;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 4000000, .seed = 1, .n = 64, .wait = 5.0};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1) bench_die("-n must be >= 1");
  worker_t *w = calloc((size_t)t, sizeof(*w));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (w == NULL || tids == NULL) bench_die("out of memory");
  bench_series_t samples;
  bench_series_init(&samples);
  for (int i = 0; i < t; i++) {
    w[i].ops = a.iters / t / PHASES;
    w[i].budget = (size_t)a.n * 1024 * 1024 / (size_t)t;
    w[i].seed = a.seed * 1000003u + (uint64_t)i;
  }
  size_t base = bench_rss();

  double t0 = bench_now();
  bench_spawn(tids, t, worker, w, sizeof(*w), NULL, 0);
  double peak = 0, sum = 0;
  long nsteady = 0;
  while (!all_idle(w, t)) {
    bench_nap(SAMPLE_MS * 1e-3);
    size_t live = total_live(w, t), rss = bench_rss();
    bench_series_add(&samples, bench_now() - t0, live, rss);
    /* Ratios count once the live set is built (half the budget reached) and before step 2. */
    if (live >= (size_t)a.n * 1024 * 1024 / 2 && !all_idle(w, t)) {
      double q = bench_rss_ratio(rss, base, live);
      if (q > peak) peak = q;
      sum += q;
      nsteady++;
    }
  }
  double secs = 0; /* the last worker's end of step 1: the sampler's naps must not count */
  for (int i = 0; i < t; i++)
    secs = w[i].done - t0 > secs ? w[i].done - t0 : secs;
  size_t live_kept = total_live(w, t);
  double after_free = bench_rss_ratio(bench_rss(), base, live_kept);

  /* Step 3: idle, still sampling (the samples show whether and when RSS comes down). */
  double idle_end = bench_now() + a.wait;
  for (double left; (left = idle_end - bench_now()) > 0;) {
    bench_nap(left < SAMPLE_MS * 1e-3 ? left : SAMPLE_MS * 1e-3);
    bench_series_add(&samples, bench_now() - t0, live_kept, bench_rss());
  }
  size_t rss_idle = bench_rss();
  double idle_ratio = bench_rss_ratio(rss_idle, base, live_kept);

  pthread_mutex_lock(&idle_lock);
  idle_over = 1;
  pthread_cond_broadcast(&idle_cond);
  pthread_mutex_unlock(&idle_lock);
  bench_join(tids, t);

  long ns = samples.n;
  bench_series_finish(&samples, a.mode);
  printf("RESULT server time=%.4f threads=%d live_mib=%ld peak_ratio=%.3f mean_ratio=%.3f "
         "after_free=%.3f idle_ratio=%.3f live_kept_kib=%zu rss_idle_kib=%zu samples=%ld\n",
         secs, t, a.n, peak, nsteady ? sum / (double)nsteady : 0.0, after_free, idle_ratio,
         live_kept / 1024, rss_idle / 1024, ns);
  free(w);
  free(tids);
  return 0;
}
