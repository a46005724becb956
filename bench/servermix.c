/*
 * servermix: a server whose threads hand 30 % of the blocks they allocate to a neighbour.
 *
 * Models request processing split between stages that run on different threads: a request's
 * buffers are allocated by the thread that parsed it and freed by the thread that answered it.
 * Each of T threads keeps SLOTS slots of live blocks of mixed sizes (log-uniform 16..8192 bytes).
 * One operation frees the block in a random slot and allocates a new one; HANDOFF_PERCENT of the
 * new blocks go into the mailbox of the next thread (thread i feeds thread i+1 mod T) instead of
 * the slot, and the slot then takes a block from the thread's own mailbox, if one has arrived (so
 * that thread frees it later: a cross-thread free). A mailbox is a bounded single-producer,
 * single-consumer ring; when it is full the block stays with its maker. What the mailboxes hold
 * at the end is freed by the main thread. -i is the total number of operations, shared equally
 * by the threads.
 *
 *   servermix [-t threads] [-i ops] [-n slots per thread] [-s seed]
 */
#include "bench.h"

#include <stdatomic.h>

#define SIZE_MIN 16
#define SIZE_MAX_ 8192
#define HANDOFF_PERCENT 30
#define RING 1024 /* blocks a mailbox holds; a power of two */

static const char usage[] =
    "servermix: threads churn mixed-size blocks and hand 30% of them to a neighbour\n"
    "  -t threads (default 2)   -i total operations (default 4000000)\n"
    "  -n slots per thread (default 512)   -s seed\n";

/* The mailbox a thread receives from: written by its left neighbour only, read by itself only. */
typedef struct {
  _Alignas(BENCH_LINE) _Atomic unsigned long head; /* next slot to read; written by the reader */
  _Alignas(BENCH_LINE) _Atomic unsigned long tail; /* next slot to write; written by the writer */
  void *ring[RING];                                /* [head, tail) hold blocks */
} mailbox_t;

typedef struct {
  long ops;
  long nslots;
  uint64_t seed;
  mailbox_t *in, *out; /* its own mailbox, its neighbour's */
  long sent, received; /* blocks handed over and taken in */
  char pad[BENCH_LINE];
} job_t;

static void *make_block(bench_rng_t *r) {
  size_t sz = bench_logsize(r, SIZE_MIN, SIZE_MAX_);
  void *b = malloc(sz);
  if (b == NULL) bench_die("malloc(%zu) returned NULL", sz);
  bench_tagged_fill(b, sz, r);
  return b;
}

static void drop_block(void *b) {
  bench_tagged_check(b, SIZE_MIN, SIZE_MAX_, "servermix");
  free(b);
}

/* Puts b into m; returns 0 when m is full. */
static int mailbox_put(mailbox_t *m, void *b) {
  unsigned long tail = atomic_load_explicit(&m->tail, memory_order_relaxed);
  if (tail - atomic_load_explicit(&m->head, memory_order_acquire) == RING) return 0;
  m->ring[tail % RING] = b;
  atomic_store_explicit(&m->tail, tail + 1, memory_order_release);
  return 1;
}

/* Takes the oldest block out of m, or returns NULL when it is empty. */
static void *mailbox_take(mailbox_t *m) {
  unsigned long head = atomic_load_explicit(&m->head, memory_order_relaxed);
  if (head == atomic_load_explicit(&m->tail, memory_order_acquire)) return NULL;
  void *b = m->ring[head % RING];
  atomic_store_explicit(&m->head, head + 1, memory_order_release);
  return b;
}

static void *worker(void *arg) {
  job_t *j = arg;
  bench_rng_t r;
  bench_rng_init(&r, j->seed, 13);
  void **slot = bench_xmalloc((size_t)j->nslots * sizeof(void *));
  for (long i = 0; i < j->nslots; i++)
    slot[i] = make_block(&r);
  for (long k = 0; k < j->ops; k++) {
    void **s = &slot[bench_below(&r, (uint64_t)j->nslots)];
    if (*s != NULL) drop_block(*s);
    void *p = make_block(&r);
    if (bench_below(&r, 100) < HANDOFF_PERCENT && mailbox_put(j->out, p)) {
      j->sent++;
      p = mailbox_take(j->in);
      if (p != NULL) j->received++;
    }
    *s = p;
  }
  for (long i = 0; i < j->nslots; i++)
    if (slot[i] != NULL) drop_block(slot[i]);
  free(slot);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 4000000, .seed = 1, .n = 512};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1) bench_die("-n must be >= 1");
  mailbox_t *boxes = aligned_alloc(BENCH_LINE, (size_t)t * sizeof(mailbox_t));
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (boxes == NULL || jobs == NULL || tids == NULL) bench_die("out of memory");
  memset(boxes, 0, (size_t)t * sizeof(mailbox_t));
  long per = a.iters / t;
  for (int i = 0; i < t; i++) {
    jobs[i].ops = per;
    jobs[i].nslots = a.n;
    jobs[i].seed = a.seed * 1000003u + (uint64_t)i;
    jobs[i].in = &boxes[i];
    jobs[i].out = &boxes[(i + 1) % t];
  }
  double t0 = bench_now();
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  bench_join(tids, t);
  double secs = bench_now() - t0;
  long sent = 0, received = 0, left = 0;
  for (int i = 0; i < t; i++) {
    sent += jobs[i].sent;
    received += jobs[i].received;
    for (void *p; (p = mailbox_take(&boxes[i])) != NULL; left++)
      drop_block(p);
  }
  if (sent != received + left)
    bench_fail("servermix: %ld blocks sent, %ld received and %ld left in mailboxes", sent, received,
               left);
  double ops = (double)per * t;
  printf("RESULT servermix time=%.4f threads=%d ops=%.0f mops_per_s=%.2f handed=%ld\n", secs, t,
         ops, ops / secs / 1e6, sent);
  free(boxes);
  free(jobs);
  free(tids);
  return 0;
}
