/* meta: fixed-size pools for magpie's own bookkeeping. See meta.c. */
#ifndef MAGPIE_META_H
#define MAGPIE_META_H

#include "lock.h"
#include "os.h"
#include <stdbool.h>
#include <stddef.h>

typedef struct meta_pool {
  lock_t lock;
  size_t size;            /* object size; objects are aligned to its lowest set bit, max 128 */
  void *free;             /* freed objects, linked through their first word (lock) */
  char *bump, *end;       /* the unused rest of the newest chunk (lock) */
  size_t live;            /* objects handed out and not freed (lock) */
  struct meta_pool *next; /* every pool that has allocated, for fork (meta_pools_lock) */
  bool listed;            /* on that list (set once, under meta_pools_lock) */
} meta_pool_t;

/* The size of a record that one thread writes on its fast path (magazines, thread caches):
   whole cache lines, so that no other thread's record shares a line with it. */
#define META_LINES(object_size) (((object_size) + OS_LINE - 1) & ~(OS_LINE - 1))

#define META_POOL(object_size)                                                                     \
  { LOCK_INIT, (object_size), NULL, NULL, NULL, 0, NULL, false }

void *meta_alloc(meta_pool_t *pool); /* zeroed; NULL when the kernel refuses memory */
void meta_free(meta_pool_t *pool, void *obj);
/* Adds the counters of every pool's lock and of the pools' list lock to *lock. */
void meta_lock_stats(lock_stats_t *lock);
void meta_fork_prepare(void);
void meta_fork_parent(void);
void meta_fork_child(void);

#endif
