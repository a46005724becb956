/*
 * prodcons: one set of threads allocates, another frees.
 *
 * Models a pipeline (network receive thread handing requests to workers, a logger thread, a
 * message queue): producer threads allocate blocks (log-uniform 8..1024 bytes), fill them and
 * pass them in batches of BATCH through a bounded queue to consumer threads, which check and free
 * them. Every free is a cross-thread free, and an allocator that keeps freed blocks in the
 * consumer's cache, never returning them to where the producer allocates, grows without bound.
 * Half the threads produce and half consume (2 threads: one of each); producer p feeds consumer
 * p mod C. With -n SIZE every block is SIZE bytes (the many-core matrix, bench/scaling.py, runs
 * 64-byte blocks) instead of log-uniform 8..1024. The queues block (mutex and condition variable)
 * so that oversubscribed runs do not spin; the lock is taken once per batch, so its cost is small
 * beside BATCH malloc/free pairs. -i is the total number of blocks, shared by the producers.
 *
 *   prodcons [-t threads >= 2] [-i blocks] [-n block size] [-s seed]
 */
#include "bench.h"

#define SIZE_MIN 8
#define SIZE_MAX_ 1024
#define BATCH 256      /* blocks per queue transfer */
#define QUEUE_DEPTH 32 /* batches a queue may hold before producers wait (bounds memory) */

static const char usage[] =
    "prodcons: producer threads allocate, consumer threads free\n"
    "  -t threads >= 2, half producers (default 2)   -i total blocks (default 4000000)\n"
    "  -n block size, 8..1024 (default 0: log-uniform 8..1024)   -s seed\n";

typedef struct batch {
  struct batch *next;
  int n;
  void *blk[BATCH];
} batch_t;

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t nonempty, nonfull; /* signalled on empty->nonempty and full->nonfull */
  batch_t *head, *tail;             /* protected by lock */
  int depth;                        /* batches queued; protected by lock */
  int producers_left;               /* producers still feeding this queue; protected by lock */
  long received;                    /* blocks freed by this queue's consumer (consumer only) */
  char pad[BENCH_LINE];
} queue_t;

typedef struct {
  queue_t *q;
  long count;  /* blocks to produce */
  size_t size; /* bytes per block; 0: log-uniform SIZE_MIN..SIZE_MAX_ */
  uint64_t seed;
  char pad[BENCH_LINE];
} producer_t;

static void put(queue_t *q, batch_t *b) {
  pthread_mutex_lock(&q->lock);
  while (q->depth >= QUEUE_DEPTH)
    pthread_cond_wait(&q->nonfull, &q->lock);
  b->next = NULL;
  if (q->tail != NULL)
    q->tail->next = b;
  else
    q->head = b;
  q->tail = b;
  if (q->depth++ == 0) pthread_cond_broadcast(&q->nonempty);
  pthread_mutex_unlock(&q->lock);
}

/* Returns the next batch, or NULL when the queue is empty and all its producers have finished. */
static batch_t *get(queue_t *q) {
  pthread_mutex_lock(&q->lock);
  while (q->head == NULL && q->producers_left > 0)
    pthread_cond_wait(&q->nonempty, &q->lock);
  batch_t *b = q->head;
  if (b != NULL) {
    q->head = b->next;
    if (q->head == NULL) q->tail = NULL;
    if (q->depth-- == QUEUE_DEPTH) pthread_cond_broadcast(&q->nonfull);
  }
  pthread_mutex_unlock(&q->lock);
  return b;
}

static void *producer(void *arg) {
  producer_t *p = arg;
  bench_rng_t r;
  bench_rng_init(&r, p->seed, 2);
  long left = p->count;
  while (left > 0) {
    batch_t *b = bench_xmalloc(sizeof(*b));
    b->n = left < BATCH ? (int)left : BATCH;
    for (int i = 0; i < b->n; i++) {
      size_t sz = p->size != 0 ? p->size : bench_logsize(&r, SIZE_MIN, SIZE_MAX_);
      void *x = malloc(sz);
      if (x == NULL) bench_die("malloc(%zu) returned NULL", sz);
      bench_fill(x, sz, (bench_rand(&r) << 32) | sz);
      b->blk[i] = x;
    }
    left -= b->n;
    put(p->q, b);
  }
  pthread_mutex_lock(&p->q->lock);
  if (--p->q->producers_left == 0) pthread_cond_broadcast(&p->q->nonempty);
  pthread_mutex_unlock(&p->q->lock);
  return NULL;
}

static void *consumer(void *arg) {
  queue_t *q = arg;
  batch_t *b;
  while ((b = get(q)) != NULL) {
    for (int i = 0; i < b->n; i++) {
      uint64_t tag;
      memcpy(&tag, b->blk[i], sizeof(tag));
      size_t sz = (size_t)(tag & 0xffffffffu);
      if (sz < SIZE_MIN || sz > SIZE_MAX_)
        bench_fail("prodcons: block %p holds tag %#llx", b->blk[i], (unsigned long long)tag);
      bench_check(b->blk[i], sz, tag, "prodcons");
      free(b->blk[i]);
    }
    q->received += b->n;
    free(b);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 4000000, .seed = 1};
  bench_parse(argc, argv, &a, usage);
  if (a.threads < 2) bench_die("prodcons needs -t >= 2");
  if (a.n != 0 && (a.n < SIZE_MIN || a.n > SIZE_MAX_)) bench_die("-n must be 0 or 8..1024");
  int np = a.threads / 2, nc = a.threads - np;

  queue_t *qs = calloc((size_t)nc, sizeof(*qs));
  producer_t *ps = calloc((size_t)np, sizeof(*ps));
  pthread_t *tids = calloc((size_t)a.threads, sizeof(pthread_t));
  if (qs == NULL || ps == NULL || tids == NULL) bench_die("out of memory");
  for (int c = 0; c < nc; c++) {
    pthread_mutex_init(&qs[c].lock, NULL);
    pthread_cond_init(&qs[c].nonempty, NULL);
    pthread_cond_init(&qs[c].nonfull, NULL);
  }
  long total = 0;
  for (int p = 0; p < np; p++) {
    ps[p].q = &qs[p % nc];
    ps[p].q->producers_left++;
    ps[p].count = a.iters / np + (p < a.iters % np);
    ps[p].seed = a.seed * 1000003u + (uint64_t)p;
    ps[p].size = (size_t)a.n;
    total += ps[p].count;
  }

  double t0 = bench_now();
  bench_spawn(tids, nc, consumer, qs, sizeof(*qs), NULL, 0);
  bench_spawn(tids + nc, np, producer, ps, sizeof(*ps), NULL, 0);
  bench_join(tids, a.threads);
  double secs = bench_now() - t0;

  long got = 0;
  for (int c = 0; c < nc; c++)
    got += qs[c].received;
  if (got != total) bench_fail("prodcons: %ld blocks produced, %ld consumed", total, got);
  printf("RESULT prodcons time=%.4f threads=%d producers=%d consumers=%d blocks=%ld "
         "mblocks_per_s=%.2f\n",
         secs, a.threads, np, nc, total, (double)total / secs / 1e6);
  free(qs);
  free(ps);
  free(tids);
  return 0;
}
