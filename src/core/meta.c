/*
 * meta: pools of fixed-size records that magpie itself needs (vmem segment tags, slab
 * descriptors, magazines, thread caches, caches).
 *
 * Theory
 *   1. Metadata never lives in the heap it describes: a corrupted user block cannot overwrite
 *      a slab descriptor, and the allocator needs no allocator to describe itself.
 *   2. A pool carves chunks mapped from the OS into objects of one size; freed objects go on a
 *      LIFO list and are reused, never unmapped (metadata is a small fraction of the heap:
 *      a 64 KiB span costs one 128-byte descriptor).
 *   3. Objects whose size is a multiple of 128 are 128-byte aligned: slab descriptors keep a
 *      size-class tag in the low 7 bits of their page-map entries. Records that their thread
 *      writes on every allocation (magazines, thread caches) are sized in whole cache lines
 *      (META_LINES): two threads' magazines side by side in one line made every push and pop
 *      a cache-line transfer (active false sharing in the allocator's own metadata).
 *   4. Lock order: a pool's lock is a leaf; nothing is called while holding it. A chunk is
 *      mapped, and a reused record cleared, without it (a fork meanwhile leaves the child a
 *      chunk it never uses). Threads that found the pool empty together each map one; the
 *      first back makes its chunk the pool's, the others unmap theirs untouched: carving them
 *      onto the free list would make every page of each resident, and a crowd of threads that
 *      start at once maps one each (docs/decisions/crowd-made-once.md).
 */
#include "meta.h"
#include "inject.h"
#include "os.h"

#include <string.h>

#define META_CHUNK ((size_t)64 << 10) /* small enough to waste little, big enough to amortise */

static lock_t meta_pools_lock = LOCK_INIT;
static meta_pool_t *meta_pools; /* every pool that has carved a chunk */

/* Puts a pool on the fork list before it first takes its own lock, never while holding it. */
static void meta_register(meta_pool_t *pool) {
  lock_acquire(&meta_pools_lock);
  if (!pool->listed) {
    pool->next = meta_pools;
    meta_pools = pool;
    __atomic_store_n(&pool->listed, true, __ATOMIC_RELEASE);
  }
  lock_release(&meta_pools_lock);
}

void meta_lock_stats(lock_stats_t *lock) {
  lock_acquire(&meta_pools_lock);
  for (meta_pool_t *p = meta_pools; p; p = p->next)
    lock_stats_add(lock, &p->lock);
  lock_stats_add(lock, &meta_pools_lock);
  lock_release(&meta_pools_lock);
}

/* The lock covers the list and the bump pointer only (theory 4): the mapping is a system
   call, the clearing a few KiB for a thread's cache, and a thread preempted in either would
   hold up every thread that needs a record of the pool. */
void *meta_alloc(meta_pool_t *pool) {
  if (!__atomic_load_n(&pool->listed, __ATOMIC_ACQUIRE)) meta_register(pool);
  size_t chunk = pool->size * 16 > META_CHUNK ? pool->size * 16 : META_CHUNK;
  char *mem = NULL; /* a chunk mapped while the lock was let go */
  bool reused = false;
  void *obj;
  lock_acquire(&pool->lock);
  for (;;) {
    if ((obj = pool->free)) {
      pool->free = *(void **)obj;
      reused = true;
    } else if ((size_t)(pool->end - pool->bump) >= pool->size) {
      obj = pool->bump; /* fresh from mmap: already zero */
      pool->bump += pool->size;
    } else if (mem) {
      pool->bump = mem;
      pool->end = mem + chunk - chunk % pool->size;
      mem = NULL;
      continue;
    } else {
      lock_release(&pool->lock);
      INJECT(INJECT_UNLOCKED);
      mem = os_map_metadata(chunk); /* holds block addresses: hidden from memcheck */
      if (!mem) return NULL;
      lock_acquire(&pool->lock);
      continue;
    }
    break;
  }
  pool->live++;
  lock_release(&pool->lock);
  if (mem) os_unmap(mem, chunk); /* another thread refilled the pool meanwhile (theory 4) */
  if (reused) memset(obj, 0, pool->size);
  return obj;
}

void meta_free(meta_pool_t *pool, void *obj) {
  lock_acquire(&pool->lock);
  *(void **)obj = pool->free;
  pool->free = obj;
  pool->live--;
  lock_release(&pool->lock);
}

void meta_fork_prepare(void) {
  lock_acquire(&meta_pools_lock);
  for (meta_pool_t *p = meta_pools; p; p = p->next)
    lock_acquire(&p->lock);
}

void meta_fork_parent(void) {
  for (meta_pool_t *p = meta_pools; p; p = p->next)
    lock_release(&p->lock);
  lock_release(&meta_pools_lock);
}

void meta_fork_child(void) {
  for (meta_pool_t *p = meta_pools; p; p = p->next)
    lock_init(&p->lock);
  lock_init(&meta_pools_lock);
}
