/*
 * mag_slots: a thread's magazines of object caches (magpie_cache_*). Each thread maps, on its
 * first use of one, MAG_CACHE_SLOTS slots (cache_slot_t, mag.h) indexed by the cache's id; a
 * cache with a larger id, or a thread past its exit, goes straight to the slab layer.
 *
 * Theory
 *   1. A slot holds magazines of the cache it names only. A slot that does not name the cache
 *      of its id (first use, or a destroyed cache's slot, which mag_cache_drain emptied and
 *      cleared) starts again with the sentinel.
 *   2. Only the owner works on its slots, without a lock: the reaper leaves object caches
 *      alone, since their constructors and destructors, run by the slab layer inside a miss,
 *      may call malloc and miss again (mag.c, mag_miss_begin). The exceptions are the thread's
 *      exit and mag_cache_drain, which the program calls only once the cache is out of use.
 *   3. Freeing checks that the object belongs to the cache (slab_of); the front layer's inline
 *      pop and push (front/caches.c) serve the loaded magazine and call here when it cannot.
 * Locking: mag_cache_drain and mag_cache_counts read other threads' slots under
 * mag_registry_lock; the slots' pointer is published with a release store for them. A slot's
 * counts are the owner's (STAT_ADD); an exiting thread adds them to its caches' exited counts.
 */
#include "mag_impl.h"
#include "os.h"
#include "report.h"
#include "slab.h"

/* The calling thread's magazines of cp, or NULL: it has none (straight to the slab layer). */
static thread_mags_t *mag_slot_of(tcache_t *tc, cache_t *cp) {
  if (tc == &tcache_dead || cp->id >= MAG_CACHE_SLOTS) return NULL;
  cache_slot_t *slots = tc->slots;
  if (!slots) { /* published atomically: mag_cache_drain reads it from other threads */
    if (!(slots = os_map(MAG_CACHE_SLOTS * sizeof(cache_slot_t)))) return NULL;
    __atomic_store_n(&tc->slots, slots, __ATOMIC_RELEASE);
  }
  cache_slot_t *s = &slots[cp->id];
  if (s->cache != cp) { /* first use, or the slot of a destroyed cache (already drained) */
    s->own = (thread_mags_t){MAG_PAIR_EMPTY, {0, 0}};
    __atomic_store_n(&s->cache, cp, __ATOMIC_RELEASE); /* mag_cache_counts: counts reset first */
  }
  return &s->own;
}

static void *mag_slot_pop(cache_t *cp, thread_mags_t *s) {
  if (!s) return mag_direct_alloc(cp);
  mag_pair_t *t = &s->mags;
  void *obj = t->loaded->n ? t->loaded->rounds[--t->loaded->n] : mag_own_alloc_miss(cp, t);
  if (obj) STAT_ADD(s->count.allocs, 1);
  return obj;
}

static void mag_slot_push(cache_t *cp, thread_mags_t *s, void *obj) {
  if (!s) {
    mag_direct_free(cp, obj);
    return;
  }
  mag_pair_t *t = &s->mags;
  STAT_ADD(s->count.frees, 1);
  if (t->loaded->n < t->loaded->cap)
    t->loaded->rounds[t->loaded->n++] = obj;
  else if (!mag_own_free_miss(cp, t, obj))
    mag_direct_free(cp, obj);
}

void *mag_cache_alloc(cache_t *cp) {
  return mag_slot_pop(cp, mag_slot_of(mag_self(), cp));
}

void mag_cache_free(cache_t *cp, void *obj) {
  if (!slab_of(cp, obj)) report_heap_error("invalid free", obj, "not an object of this cache");
  mag_slot_push(cp, mag_slot_of(mag_self(), cp), obj);
}

/* Thread tc's slot of cp, from another thread (mag_registry_lock held), or NULL: it has none. */
static cache_slot_t *mag_slot_seen(tcache_t *tc, cache_t *cp) {
  cache_slot_t *slots = __atomic_load_n(&tc->slots, __ATOMIC_ACQUIRE);
  if (!slots || __atomic_load_n(&slots[cp->id].cache, __ATOMIC_ACQUIRE) != cp) return NULL;
  return &slots[cp->id];
}

void mag_cache_drain(cache_t *cp) {
  if (cp->id >= MAG_CACHE_SLOTS) return;
  mag_registry_enter();
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry; tc = tc->next) {
    cache_slot_t *s = mag_slot_seen(tc, cp);
    if (s) {
      mag_pair_to_depot(cp, &s->own.mags);
      __atomic_store_n(&s->cache, NULL, __ATOMIC_RELAXED);
    }
  }
  mag_registry_leave();
}

void mag_slots_to_depot(tcache_t *tc) {
  if (tc->slots)
    for (unsigned i = 0; i < MAG_CACHE_SLOTS; i++) {
      cache_slot_t *s = &tc->slots[i];
      if (!s->cache) continue;
      mag_pair_to_depot(s->cache, &s->own.mags);
      s->cache->exited_allocs += STAT_READ(s->own.count.allocs);
      s->cache->exited_frees += STAT_READ(s->own.count.frees);
    }
}

void mag_cache_counts(cache_t *cp, uint64_t *allocs, uint64_t *frees) {
  mag_registry_enter();
  *allocs = cp->exited_allocs;
  *frees = cp->exited_frees;
  if (cp->id < MAG_CACHE_SLOTS)
    for (tcache_t *tc = mag_registry.next; tc != &mag_registry; tc = tc->next) {
      cache_slot_t *s = mag_slot_seen(tc, cp);
      if (!s) continue;
      *allocs += STAT_READ(s->own.count.allocs);
      *frees += STAT_READ(s->own.count.frees);
    }
  mag_registry_leave();
}

void mag_slots_unmap(tcache_t *tc) {
  if (tc->slots) os_unmap(tc->slots, MAG_CACHE_SLOTS * sizeof(cache_slot_t));
}
