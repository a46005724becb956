/*
 * A library linked into the program (early_thread.c) whose constructor starts a thread before
 * main runs, and returns only once that thread has allocated its first blocks: the thread and
 * its first allocations predate main and any allocator set-up main's thread would do. The thread
 * then hands EARLY_BLOCKS blocks (blocks.h) to the program and checks and frees every block the
 * program hands it, until the program says it is done.
 *
 * Channels are unbounded enough (CHANNEL_SLOTS >= what either side ever sends) that a send never
 * waits; a receive waits for the next block. A NULL block ends a direction.
 */
#include "blocks.h"

#include <pthread.h>
#include <unistd.h>

#define EARLY_BLOCKS 3000
#define EARLY_FIRST 100 /* made before the constructor returns */
#define CHANNEL_SLOTS 4096

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t more;
  void *slot[CHANNEL_SLOTS];
  unsigned sent, taken;
} channel_t;

static channel_t to_program = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0};
static channel_t to_thread = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0};
static pthread_mutex_t started_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cond = PTHREAD_COND_INITIALIZER;
static int first_made;
static pthread_t thread;
static unsigned long thread_bad, thread_freed;

/* Returns 0 when the channel is full (the caller's protocol broke). */
static int channel_send(channel_t *c, void *block) {
  pthread_mutex_lock(&c->lock);
  int room = c->sent - c->taken < CHANNEL_SLOTS;
  if (room) c->slot[c->sent++ % CHANNEL_SLOTS] = block;
  pthread_cond_signal(&c->more);
  pthread_mutex_unlock(&c->lock);
  return room;
}

static void *channel_receive(channel_t *c) {
  pthread_mutex_lock(&c->lock);
  while (c->taken == c->sent)
    pthread_cond_wait(&c->more, &c->lock);
  void *block = c->slot[c->taken++ % CHANNEL_SLOTS];
  pthread_mutex_unlock(&c->lock);
  return block;
}

static void *early_main(void *arg) {
  (void)arg;
  api_rng_t rng = {0xfeedull};
  for (int i = 0; i < EARLY_BLOCKS; i++) {
    void *b = block_new(block_size(&rng), (uintptr_t)i);
    if (b == NULL || !channel_send(&to_program, b)) thread_bad++;
    if (i + 1 == EARLY_FIRST) {
      pthread_mutex_lock(&started_lock);
      first_made = 1;
      pthread_cond_signal(&started_cond);
      pthread_mutex_unlock(&started_lock);
    }
  }
  channel_send(&to_program, NULL);
  for (void *b; (b = channel_receive(&to_thread)) != NULL;) {
    thread_bad += !block_ok(b);
    free(b);
    thread_freed++;
  }
  return NULL;
}

__attribute__((constructor)) static void early_thread_start(void) {
  if (pthread_create(&thread, NULL, early_main, NULL) != 0) {
    fprintf(stderr, "early_thread: pthread_create failed in the constructor\n");
    _exit(1);
  }
  pthread_mutex_lock(&started_lock);
  while (!first_made)
    pthread_cond_wait(&started_cond, &started_lock);
  pthread_mutex_unlock(&started_lock);
}

/* The thread's blocks, one by one; NULL once it has sent them all. */
void *early_take(void) {
  return channel_receive(&to_program);
}

/* A block for the thread to check and free; NULL tells it the program is done. */
int early_give(void *block) {
  return channel_send(&to_thread, block);
}

/* Waits for the thread (after early_give(NULL)); its counts of bad and freed blocks. */
int early_join(unsigned long *bad, unsigned long *freed) {
  int rc = pthread_join(thread, NULL);
  *bad = thread_bad;
  *freed = thread_freed;
  return rc;
}
