/*
 * stress_prodcons: blocks allocated on one thread and freed on another.
 *
 * Producers allocate blocks of random sizes (16 B to 64 KiB biased small, one in a hundred up to
 * 1 MiB, some through calloc), fill them with their pattern and push them into bounded queues;
 * consumers pop them, check them, keep a few for a while, check them again and free them. Every
 * block thus dies on a thread other than the one that allocated it.
 *
 * Nothing may be stranded, which the program checks two ways:
 *   - reuse: the main thread samples magpie's mapped bytes while each round runs, and runs the
 *     same workload `rounds` times, each time with fresh threads. Memory freed across threads in
 *     one round must serve the next, so no later round may map more than round 1's peak plus
 *     strand_pct percent of the bytes one round passes across threads. An allocator that
 *     strands what crosses threads maps about that much again each round (several times round
 *     1's peak); one that caches maps a bounded amount more once, while its caches (the CPUs'
 *     magazines of every class, the depots) fill, which a bound in multiples of round 1's peak
 *     would confuse with a leak.
 *   - accounting: after the last round magpie_trim takes every CPU's and thread's magazines and
 *     the depots back to the slabs, so no block may be left counted as cached: a block freed
 *     into a magazine that nothing can reach any more would be.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEST "stress_prodcons"
/* Slots per queue: bounds the blocks in flight, hence the live volume the peak is compared to. */
#define QUEUE_CAP 64
/* Blocks a consumer keeps before freeing the oldest: blocks live a while on their new thread. */
#define HOLD 16
/* Interval between samples of mapped bytes while a round runs. */
#define SAMPLE_NS 20000000L

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  stress_block_t ring[QUEUE_CAP]; /* guarded by mu */
  size_t head, count;             /* guarded by mu */
  int closed;                     /* guarded by mu: no more pushes */
} queue_t;

static long nproducers, nconsumers, nitems, big_pct, rounds, strand_pct;
static stress_param_t params[] = {
    {"producers", 8, "producer threads", &nproducers},
    {"consumers", 8, "consumer threads (one queue each)", &nconsumers},
    {"items", 15000, "blocks per producer per round", &nitems},
    {"big_pct", 1, "percent of blocks between 64 KiB and 1 MiB", &big_pct},
    {"rounds", 4, "rounds of the same workload", &rounds},
    {"strand_pct", 50, "mapped bytes later rounds may add to round 1's peak, % of a round's "
                       "bytes passed across threads", &strand_pct},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

static uint64_t seed;
static queue_t *queues;
static atomic_long producers_done;
static atomic_ullong produced_bytes, consumed_bytes, produced_count, consumed_count;

typedef struct {
  pthread_t thread;
  uint32_t index;
  int round;
} worker_t;

static void queue_init(queue_t *q) {
  memset(q, 0, sizeof *q);
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->not_empty, NULL);
  pthread_cond_init(&q->not_full, NULL);
}

static void queue_push(queue_t *q, const stress_block_t *b) {
  pthread_mutex_lock(&q->mu);
  while (q->count == QUEUE_CAP)
    pthread_cond_wait(&q->not_full, &q->mu);
  q->ring[(q->head + q->count) % QUEUE_CAP] = *b;
  q->count++;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

/* Returns 0 once the queue is closed and empty. */
static int queue_pop(queue_t *q, stress_block_t *b) {
  pthread_mutex_lock(&q->mu);
  while (q->count == 0 && !q->closed)
    pthread_cond_wait(&q->not_empty, &q->mu);
  int got = q->count > 0;
  if (got) {
    *b = q->ring[q->head];
    q->head = (q->head + 1) % QUEUE_CAP;
    q->count--;
    pthread_cond_signal(&q->not_full);
  }
  pthread_mutex_unlock(&q->mu);
  return got;
}

static void queue_close(queue_t *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

static void *producer(void *arg) {
  worker_t *w = arg;
  stress_rng_t rng;
  /* The same stream every round: each round allocates the same sizes as the first. */
  stress_rng_seed(&rng, seed, w->index);
  unsigned long long bytes = 0;
  for (long i = 0; i < nitems; i++) {
    size_t size = stress_rng_pct(&rng, (unsigned)big_pct)
                      ? (size_t)stress_rng_range(&rng, 64 * 1024 + 1, 1024 * 1024)
                      : stress_size_skewed(&rng, 16, 64 * 1024);
    stress_block_t b;
    const char *how = "malloc";
    void *p;
    if (stress_rng_pct(&rng, 10)) {
      how = "calloc";
      p = magpie_calloc(1, size);
      if (p)
        for (size_t k = 0; k < size; k++)
          if (((unsigned char *)p)[k])
            stress_fail(TEST ": calloc(1, %zu) = %p: byte %zu is %#x, not zero", size, p, k,
                        ((unsigned char *)p)[k]);
    } else {
      p = magpie_malloc(size);
    }
    stress_block_new(&b, p, size, stress_rng_next(&rng), how, w->index, 0, TEST);
    bytes += size;
    queue_push(&queues[stress_rng_below(&rng, (uint64_t)nconsumers)], &b);
  }
  atomic_fetch_add(&produced_bytes, bytes);
  atomic_fetch_add(&produced_count, (unsigned long long)nitems);
  atomic_fetch_add(&producers_done, 1);
  return NULL;
}

static void *consumer(void *arg) {
  worker_t *w = arg;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed ^ 0xc0115e11, w->index);
  stress_block_t hold[HOLD];
  memset(hold, 0, sizeof hold);
  unsigned long long bytes = 0, count = 0;
  stress_block_t b;
  while (queue_pop(&queues[w->index], &b)) {
    stress_block_check(&b, TEST, "after handover from producer to consumer");
    bytes += b.size;
    count++;
    /* Keep it in a random hold slot; free what was there. */
    size_t k = (size_t)stress_rng_below(&rng, HOLD);
    stress_block_free(&hold[k], TEST);
    hold[k] = b;
  }
  for (size_t k = 0; k < HOLD; k++)
    stress_block_free(&hold[k], TEST);
  atomic_fetch_add(&consumed_bytes, bytes);
  atomic_fetch_add(&consumed_count, count);
  return NULL;
}

/* Runs one round; returns the peak of mapped bytes sampled while it ran, and after, and sets
   *passed to the bytes that crossed threads. */
static size_t run_round(int round, unsigned long long *passed) {
  worker_t *prod = calloc((size_t)nproducers, sizeof *prod);
  worker_t *cons = calloc((size_t)nconsumers, sizeof *cons);
  if (!prod || !cons)
    stress_fail(TEST ": out of memory for thread records");
  atomic_store(&producers_done, 0);
  atomic_store(&produced_bytes, 0);
  atomic_store(&consumed_bytes, 0);
  atomic_store(&produced_count, 0);
  atomic_store(&consumed_count, 0);
  for (long i = 0; i < nconsumers; i++) {
    queue_init(&queues[i]);
    cons[i].index = (uint32_t)i;
    cons[i].round = round;
    stress_thread_start(&cons[i].thread, consumer, &cons[i], TEST);
  }
  for (long i = 0; i < nproducers; i++) {
    prod[i].index = (uint32_t)i;
    prod[i].round = round;
    stress_thread_start(&prod[i].thread, producer, &prod[i], TEST);
  }
  size_t peak = stress_mapped_bytes(TEST), samples = 1;
  while (atomic_load(&producers_done) < nproducers) {
    struct timespec ts = {0, SAMPLE_NS};
    nanosleep(&ts, NULL);
    size_t m = stress_mapped_bytes(TEST);
    samples++;
    if (m > peak)
      peak = m;
  }
  for (long i = 0; i < nproducers; i++)
    stress_thread_join(prod[i].thread, TEST);
  for (long i = 0; i < nconsumers; i++)
    queue_close(&queues[i]);
  for (long i = 0; i < nconsumers; i++)
    stress_thread_join(cons[i].thread, TEST);
  size_t after = stress_mapped_bytes(TEST);
  if (after > peak)
    peak = after;
  unsigned long long pc = atomic_load(&produced_count), cc = atomic_load(&consumed_count);
  unsigned long long pb = atomic_load(&produced_bytes), cb = atomic_load(&consumed_bytes);
  if (pc != cc || pb != cb)
    stress_fail(TEST ": round %d: produced %llu blocks (%llu bytes) but consumed %llu (%llu bytes)",
                round, pc, pb, cc, cb);
  for (long i = 0; i < nconsumers; i++) {
    pthread_mutex_destroy(&queues[i].mu);
    pthread_cond_destroy(&queues[i].not_empty);
    pthread_cond_destroy(&queues[i].not_full);
  }
  stress_log(TEST ": round %d: %llu blocks, %.1f MiB passed across threads; mapped bytes peak "
             "%.1f MiB over %zu samples, %.1f MiB after the round",
             round, pc, (double)pb / 1048576.0, (double)peak / 1048576.0, samples,
             (double)after / 1048576.0);
  free(prod);
  free(cons);
  *passed = pb;
  return peak;
}

/* After magpie_trim no block of malloc's classes is cached: every CPU's and thread's magazines
   and the depots went back to the slabs. One still counted as cached is out of every reach. */
static void check_trimmed(void) {
  magpie_trim();
  size_t stranded = stress_cached_bytes(TEST, "after magpie_trim");
  if (stranded)
    stress_fail(TEST ": %zu bytes still cached after magpie_trim: blocks freed across threads "
                     "are stranded where no thread can take them",
                stranded);
  stress_log(TEST ": after magpie_trim nothing is cached");
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (nproducers < 1 || nconsumers < 1 || nitems < 1 || big_pct < 0 || big_pct > 100)
    stress_fail(TEST ": bad parameters");
  queues = calloc((size_t)nconsumers, sizeof *queues);
  if (!queues)
    stress_fail(TEST ": out of memory for queues");

  if (rounds < 2)
    stress_fail(TEST ": rounds must be at least 2");
  double t0 = stress_now();
  unsigned long long passed;
  size_t peak1 = run_round(1, &passed);
  size_t limit = peak1 + (size_t)((double)passed * (double)strand_pct / 100.0);
  for (int r = 2; r <= rounds; r++) {
    size_t peak = run_round(r, &passed);
    if (peak > limit)
      stress_fail(TEST ": memory freed across threads is not reused: mapped bytes reached %zu in "
                  "round %d, more than round 1's peak %zu plus %ld%% of the %llu bytes a round "
                  "passes across threads (limit %zu)",
                  peak, r, peak1, strand_pct, passed, limit);
  }
  check_trimmed();
  free(queues);
  stress_log(TEST ": ok (%.2f s)", stress_now() - t0);
  return 0;
}
