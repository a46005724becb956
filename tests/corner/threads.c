/*
 * Many more live threads than CPUs, and more than a table of 64 per-thread entries would hold:
 * 200 threads, all alive at once (a barrier holds each until every one has started), allocate
 * blocks of mixed sizes, keep some, and post others to the mailboxes of two other threads. Each
 * thread frees what it receives, blocks another thread allocated, after checking their contents
 * (blocks.h), and at the end checks and frees what it kept. Every thread's cache, magazines and
 * thread-exit path run while 199 others do the same; a block handed out twice, corrupted, lost
 * or freed into the wrong place shows as a failed check or a count that does not add up.
 */
#include "blocks.h"

#include <pthread.h>

#define THREADS 200
#define ROUNDS 150
#define KEPT 16           /* blocks a thread holds at once */
#define MAILBOX 64        /* blocks waiting for one thread; a sender frees its block when full */
#define STACK (256 * KiB) /* 200 default stacks would reserve 1.6 GiB for nothing */

typedef struct {
  pthread_mutex_t lock;
  void *slot[MAILBOX];
  int count;
} mailbox_t;

static mailbox_t mailbox[THREADS];
static pthread_barrier_t all_started, all_sent;
static unsigned long sent, refused, received, bad; /* updated atomically */

static void post(int to, void *block) {
  mailbox_t *m = &mailbox[to];
  pthread_mutex_lock(&m->lock);
  int fits = m->count < MAILBOX;
  if (fits) m->slot[m->count++] = block;
  pthread_mutex_unlock(&m->lock);
  if (fits) {
    __atomic_add_fetch(&sent, 1, __ATOMIC_RELAXED);
  } else {
    __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
    if (!block_ok(block)) __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    free(block);
  }
}

/* Checks and frees every block waiting in thread `self`'s mailbox. */
static void drain(int self) {
  mailbox_t *m = &mailbox[self];
  void *got[MAILBOX];
  pthread_mutex_lock(&m->lock);
  int n = m->count;
  memcpy(got, m->slot, (size_t)n * sizeof *got);
  m->count = 0;
  pthread_mutex_unlock(&m->lock);
  for (int i = 0; i < n; i++) {
    if (!block_ok(got[i])) __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    free(got[i]);
  }
  __atomic_add_fetch(&received, (unsigned long)n, __ATOMIC_RELAXED);
}

static void *worker(void *arg) {
  int self = (int)(uintptr_t)arg;
  api_rng_t rng = {0x9e3779b97f4a7c15ull * (uint64_t)(self + 1)};
  void *kept[KEPT] = {0};
  unsigned long local_bad = 0;
  pthread_barrier_wait(&all_started);
  for (int round = 0; round < ROUNDS; round++) {
    int k = (int)(api_rng_next(&rng) % KEPT);
    if (kept[k] != NULL) {
      local_bad += !block_ok(kept[k]);
      free(kept[k]);
    }
    kept[k] = block_new(block_size(&rng), (uintptr_t)self << 20 | (uintptr_t)round);
    void *a = block_new(block_size(&rng), api_rng_next(&rng));
    void *b = block_new(block_size(&rng), api_rng_next(&rng));
    if (kept[k] == NULL || a == NULL || b == NULL) {
      local_bad++;
      break;
    }
    post((self + 1) % THREADS, a);   /* a neighbour, likely running beside this thread */
    post((self + 101) % THREADS, b); /* one far away in creation order */
    if (round % 8 == 7) drain(self);
  }
  pthread_barrier_wait(&all_sent); /* nobody posts any more: mailboxes can be emptied */
  drain(self);
  for (int k = 0; k < KEPT; k++)
    if (kept[k] != NULL) {
      local_bad += !block_ok(kept[k]);
      free(kept[k]);
    }
  __atomic_add_fetch(&bad, local_bad, __ATOMIC_RELAXED);
  return NULL;
}

int main(void) {
  api_begin("threads");
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0 && pthread_attr_setstacksize(&attr, STACK) == 0);
  REQUIRE(pthread_barrier_init(&all_started, NULL, THREADS) == 0);
  REQUIRE(pthread_barrier_init(&all_sent, NULL, THREADS) == 0);
  pthread_t tid[THREADS];
  for (int i = 0; i < THREADS; i++) {
    REQUIRE(pthread_mutex_init(&mailbox[i].lock, NULL) == 0);
    REQUIRE(pthread_create(&tid[i], &attr, worker, (void *)(uintptr_t)i) == 0);
  }
  for (int i = 0; i < THREADS; i++)
    REQUIRE(pthread_join(tid[i], NULL) == 0);
  fprintf(stderr,
          "  %d threads: %lu blocks passed between threads, %lu received, %lu kept by their "
          "sender (mailbox full), %lu bad\n",
          THREADS, sent, received, refused, bad);
  CHECK(bad == 0);
  CHECK(sent == received);
  CHECK(sent + refused == 2ul * THREADS * ROUNDS); /* every block posted is accounted for */
  CHECK(sent > 0);
  /* The threads are gone; their memory is reusable by this one. */
  void *after = block_new(100, 1);
  REQUIRE(after != NULL);
  CHECK(block_ok(after));
  free(after);
  return api_end();
}
