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
 * -m share adds, once every thread has done its operations and while each still holds its
 * blocks, how the threads' live blocks lie: the percentage of the 64-byte lines, and of the
 * 4 KiB pages, that hold blocks of two threads or more. An allocator that gives threads blocks
 * of the same lines makes them write each other's lines (false sharing); of the same pages,
 * share what the processors fetch around a line. The figures are the layout's, not the
 * timing's: the same on two CPUs as on many (the time is then not comparable).
 *
 *   threadchurn [-t threads] [-i ops] [-n slots per thread] [-s seed] [-m share]
 */
#include "bench.h"

#define SIZE_MIN 8
#define SIZE_MAX_ 512

static const char usage[] =
    "threadchurn: each thread frees and allocates random small blocks of its own\n"
    "  -t threads (default 2)   -i total operations (default 8000000)\n"
    "  -n slots per thread (default 1024)   -s seed\n"
    "  -m share: also the percentage of lines, line pairs and pages holding two threads' "
    "blocks\n";

/* -m share: the spans it looks at, by their size's log2: cache lines; the pairs of lines that
   Intel's spatial prefetcher fetches together (a thread's access to one line pulls its partner
   in, so two threads writing partners contend as if they shared a line); pages. */
#define SHARE_KINDS 3
static const int share_shift[SHARE_KINDS] = {6, 7, 12};
static const char *const share_name[SHARE_KINDS] = {"lines", "pairs", "pages"};

/* (unit, thread) for every span a live block touches, of every thread: unit is the span's
   number times SHARE_KINDS plus its kind. */
typedef struct {
  uintptr_t unit;
  int thread;
} touch_t;
typedef struct {
  pthread_mutex_t lock;
  pthread_barrier_t held; /* every thread has done its operations and holds its blocks */
  touch_t *touches;
  size_t n, cap;
} share_t;
static share_t *share;

/* Records the spans of every kind that thread's live blocks in slot[0..n) touch. */
static void share_add(const bench_block_t *slot, long n, int thread) {
  pthread_mutex_lock(&share->lock);
  for (long i = 0; i < n; i++) {
    if (slot[i].p == NULL) continue;
    uintptr_t a = (uintptr_t)slot[i].p;
    for (int k = 0; k < SHARE_KINDS; k++) {
      int shift = share_shift[k];
      for (uintptr_t u = a >> shift; u <= (a + slot[i].size - 1) >> shift; u++) {
        if (share->n == share->cap) bench_die("threadchurn -m share: table full");
        share->touches[share->n++] = (touch_t){u * SHARE_KINDS + (uintptr_t)k, thread};
      }
    }
  }
  pthread_mutex_unlock(&share->lock);
}

static int touch_cmp(const void *a, const void *b) {
  const touch_t *x = a, *y = b;
  if (x->unit != y->unit) return x->unit < y->unit ? -1 : 1;
  return (x->thread > y->thread) - (x->thread < y->thread);
}

/* Prints, for each kind, the percentage of spans that two threads' blocks or more touch, and
   how many pages a thread's live blocks touch on average (its working set's spread). */
static void share_report(int threads) {
  qsort(share->touches, share->n, sizeof(touch_t), touch_cmp);
  size_t units[SHARE_KINDS] = {0}, shared[SHARE_KINDS] = {0}, owned[SHARE_KINDS] = {0};
  for (size_t i = 0, j; i < share->n; i = j) {
    int two = 0;
    for (j = i; j < share->n && share->touches[j].unit == share->touches[i].unit; j++) {
      two |= share->touches[j].thread != share->touches[i].thread;
      owned[share->touches[i].unit % SHARE_KINDS] +=
          j == i || share->touches[j].thread != share->touches[j - 1].thread;
    }
    units[share->touches[i].unit % SHARE_KINDS]++;
    shared[share->touches[i].unit % SHARE_KINDS] += two;
  }
  for (int k = 0; k < SHARE_KINDS; k++)
    printf(" %s_shared_pct=%.2f", share_name[k],
           units[k] ? 100.0 * (double)shared[k] / (double)units[k] : 0.0);
  printf(" pages_per_thread=%.1f", (double)owned[SHARE_KINDS - 1] / (double)threads);
}

typedef struct {
  long ops;      /* operations this thread does */
  long nslots;   /* slots it keeps */
  uint64_t seed; /* of its random numbers */
  int index;     /* the thread's number (-m share) */
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
  if (share) {
    pthread_barrier_wait(&share->held);
    share_add(slot, j->nslots, j->index);
    pthread_barrier_wait(&share->held); /* no block freed before every thread has looked */
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
  if (a.mode != NULL) {
    if (strcmp(a.mode, "share") != 0) bench_die("-m takes share, not %s", a.mode);
    share = calloc(1, sizeof(*share));
    if (share == NULL) bench_die("out of memory");
    /* a block of at most SIZE_MAX_ bytes touches 9 lines, 5 pairs and 2 pages at most */
    share->cap = (size_t)t * (size_t)a.n * (SIZE_MAX_ / 64 + 1 + SIZE_MAX_ / 128 + 1 + 2);
    share->touches = malloc(share->cap * sizeof(touch_t));
    if (share->touches == NULL) bench_die("out of memory");
    pthread_mutex_init(&share->lock, NULL);
    pthread_barrier_init(&share->held, NULL, (unsigned)t);
  }
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  long per = a.iters / t;
  for (int i = 0; i < t; i++) {
    jobs[i].ops = per;
    jobs[i].nslots = a.n;
    jobs[i].seed = a.seed * 1000003u + (uint64_t)i;
    jobs[i].index = i;
  }
  double t0 = bench_now();
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  bench_join(tids, t);
  double secs = bench_now() - t0;
  double ops = (double)per * t;
  printf("RESULT threadchurn time=%.4f threads=%d ops=%.0f mops_per_s=%.2f", secs, t, ops,
         ops / secs / 1e6);
  if (share) share_report(t);
  printf("\n");
  free(jobs);
  free(tids);
  return 0;
}
