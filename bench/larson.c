/*
 * larson: a multi-threaded server in the manner of the Larson & Krishnan benchmark (1998).
 *
 * Models a server whose worker threads each keep a set of live objects of random sizes and
 * replace them at random, pass some objects to other workers, and are themselves replaced from
 * time to time (a thread pool that retires threads):
 *   - each of T threads owns S slots (-n) holding live blocks of log-uniform size 8..2048;
 *   - one operation frees the block in a random slot and allocates a new one; one operation in
 *     HANDOFF_ONE_IN also swaps the new block through a shared mailbox array, so the slot receives
 *     a block that another thread allocated (and will free it: a cross-thread free);
 *   - the run is ROUNDS rounds: at the end of each, all threads exit and T new threads take over
 *     their slot arrays, rotated by one, so every block is eventually freed by a thread other than
 *     the one that allocated it, and thread-exit paths of the allocator are exercised.
 * -i is the total number of operations, shared equally by the threads of all rounds, so the time
 * at 2, 8 or 32 threads is for the same amount of work.
 * -m respawn: as Larson's own driver (and mimalloc-bench's larson), no rounds: each thread
 * starts its successor on its slots when its share is done and exits, and nobody joins them
 * (every dead thread's stack stays mapped), RESPAWNS generations a chain; the main thread waits
 * for the last of each chain.
 * Each block carries its size and a salt in its first word and a derived byte in its last byte;
 * every block is checked before it is freed, whichever thread frees it.
 *
 * Built with -DLARSON_SIZED (bench_larson_sized), the blocks come from C++'s operator new and
 * go back through the sized operator delete, as a C++ server's objects do (mimalloc-bench's
 * larson-sized); the program then links libstdc++, whose operators a preloaded allocator
 * replaces.
 *
 *   larson [-t threads] [-i ops] [-n slots per thread] [-s seed]
 */
#include "bench.h"

#ifdef LARSON_SIZED
/* operator new(size_t) and operator delete(void *, size_t), by their Itanium ABI names */
void *larson_new(size_t size) __asm__("_Znwm");
void larson_delete(void *p, size_t size) __asm__("_ZdlPvm");
#define BLOCK_ALLOC(size) larson_new(size)
#define BLOCK_FREE(p, size) larson_delete(p, size)
#define RESULT_NAME "larson_sized"
#else
#define BLOCK_ALLOC(size) malloc(size)
#define BLOCK_FREE(p, size) ((void)(size), free(p))
#define RESULT_NAME "larson"
#endif

#include <stdatomic.h>

#define SIZE_MIN 8
#define SIZE_MAX_ 2048
#define UNIFORM_MAX 1000 /* -m uniform: sizes SIZE_MIN..UNIFORM_MAX - 1 */
#define ROUNDS 8          /* thread generations */
#define RESPAWNS 100      /* -m respawn: thread generations of each chain */
#define HANDOFF_ONE_IN 16 /* one operation in this many passes its block through a mailbox */
#define BOXES_PER_THREAD 4

static const char usage[] =
    "larson: threads replace random-size blocks, hand blocks to each other, and are replaced\n"
    "  -t threads (default 2)   -i total operations (default 4000000)\n"
    "  -n slots per thread (default 1000)   -s seed\n"
    "  -m uniform: sizes 8..999 evenly (default: log-uniform 8..2048)\n"
    "  -m respawn: each thread starts its successor and exits, unjoined (-m uniform,respawn)\n";

typedef struct {
  void **slots;  /* this worker's live blocks; inherited by its successor */
  long nslots;   /* entries in slots */
  long ops;      /* operations to do this round */
  uint64_t seed; /* for this worker in this round */
  int first;     /* 1: the slots are empty and must be filled first */
  int respawns;  /* -m respawn: successors still to start after this thread */
  char pad[BENCH_LINE];
} worker_t;

static _Atomic(void *) *boxes;
static long nboxes;

static int uniform_sizes; /* -m uniform: 8..1000 bytes, evenly (as mimalloc-bench's larson) */
static atomic_int chains_done; /* -m respawn: chains whose last thread finished */

static void *make_block(bench_rng_t *r) {
  size_t sz = uniform_sizes ? SIZE_MIN + bench_below(r, UNIFORM_MAX - SIZE_MIN)
                            : bench_logsize(r, SIZE_MIN, SIZE_MAX_);
  void *b = BLOCK_ALLOC(sz);
  if (b == NULL) bench_die("malloc(%zu) returned NULL", sz);
  bench_tagged_fill(b, sz, r);
  return b;
}


static void free_block(void *b) {
  size_t sz = bench_tagged_check(b, SIZE_MIN, SIZE_MAX_, "larson");
  BLOCK_FREE(b, sz);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  bench_rng_t r;
  bench_rng_init(&r, w->seed, 1);
  if (w->first)
    for (long i = 0; i < w->nslots; i++)
      w->slots[i] = make_block(&r);
  for (long k = 0; k < w->ops; k++) {
    long i = (long)bench_below(&r, (uint64_t)w->nslots);
    free_block(w->slots[i]);
    void *p = make_block(&r);
    if (bench_below(&r, HANDOFF_ONE_IN) == 0) {
      void *q = atomic_exchange_explicit(&boxes[bench_below(&r, (uint64_t)nboxes)], p,
                                         memory_order_acq_rel);
      p = q != NULL ? q : make_block(&r);
    }
    w->slots[i] = p;
  }
  if (w->respawns > 0) { /* the successor, on the same slots; this thread is never joined */
    w->respawns--;
    w->first = 0;
    w->seed = w->seed * 6364136223846793005u + 1442695040888963407u;
    pthread_t next;
    if (pthread_create(&next, NULL, worker, w) != 0) bench_die("pthread_create failed");
  } else {
    atomic_fetch_add(&chains_done, 1);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 4000000, .seed = 1, .n = 1000};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1) bench_die("-n must be >= 1");
  int respawn = 0;
  for (const char *m = a.mode; m && *m; m += strcspn(m, ","), m += *m == ',') {
    if (strncmp(m, "uniform", strcspn(m, ",")) == 0 && strcspn(m, ",") == 7)
      uniform_sizes = 1;
    else if (strncmp(m, "respawn", strcspn(m, ",")) == 0 && strcspn(m, ",") == 7)
      respawn = 1;
    else
      bench_die("-m: uniform, respawn or both (uniform,respawn)");
  }

  nboxes = (long)t * BOXES_PER_THREAD;
  boxes = calloc((size_t)nboxes, sizeof(*boxes));
  worker_t *w = calloc((size_t)t, sizeof(*w));
  void ***arrays = calloc((size_t)t, sizeof(void **));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (boxes == NULL || w == NULL || arrays == NULL || tids == NULL) bench_die("out of memory");
  for (int i = 0; i < t; i++)
    arrays[i] = bench_xmalloc((size_t)a.n * sizeof(void *));

  int generations = respawn ? RESPAWNS + 1 : ROUNDS;
  long per = a.iters / ((long)t * generations);
  if (per < 1) per = 1;
  double t0 = bench_now();
  if (respawn) {
    for (int i = 0; i < t; i++) {
      w[i] = (worker_t){.slots = arrays[i], .nslots = a.n, .ops = per, .first = 1,
                        .seed = a.seed * 1000003u + (uint64_t)i, .respawns = RESPAWNS};
      pthread_t first;
      if (pthread_create(&first, NULL, worker, &w[i]) != 0) bench_die("pthread_create failed");
    }
    while (atomic_load(&chains_done) < t)
      nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
  }
  for (int round = 0; round < (respawn ? 0 : ROUNDS); round++) {
    for (int i = 0; i < t; i++) {
      /* Successor i takes the slots that worker i - round (mod t) filled in round 0. */
      w[i].slots = arrays[(i + round) % t];
      w[i].nslots = a.n;
      w[i].ops = per;
      w[i].seed = a.seed * 1000003u + (uint64_t)round * 7919u + (uint64_t)i;
      w[i].first = round == 0;
    }
    bench_spawn(tids, t, worker, w, sizeof(*w), NULL, 0);
    bench_join(tids, t);
  }
  double secs = bench_now() - t0;

  long live = 0;
  for (int i = 0; i < t; i++) {
    for (long k = 0; k < a.n; k++) {
      free_block(arrays[i][k]);
      live++;
    }
    free(arrays[i]);
  }
  for (long b = 0; b < nboxes; b++) {
    void *p = atomic_load(&boxes[b]);
    if (p != NULL) {
      free_block(p);
    }
  }
  double ops = (double)per * t * generations;
  printf("RESULT " RESULT_NAME " time=%.4f threads=%d ops=%.0f mops_per_s=%.2f live_blocks=%ld\n", secs, t,
         ops, ops / secs / 1e6, live);
  free(boxes);
  free(w);
  free(arrays);
  free(tids);
  return 0;
}
