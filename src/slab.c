/*
 * slab: spans cut into equal objects, one cache's objects per slab.
 *
 * Theory
 *   1. A slab is a span of cp->span bytes from the heap arena, aligned to its size, with an
 *      out-of-band descriptor (from a metadata pool): user data never neighbours metadata.
 *      Every page of the span maps to the descriptor in the page map, tagged with the cache's
 *      size class, so free() finds an object's class in two loads.
 *   2. Objects are carved lazily: [0, carved) have been handed out at least once, the rest were
 *      never touched, so a fresh slab costs no page faults until used. Returned objects go on
 *      the slab's free list, linked through their second word (the first word of a freed
 *      malloc block carries the free marker, see fastpath.h) and are handed out first. A
 *      request for a run (a thread's first refill of a class, mag.c theory 8) takes never-used
 *      objects first where the first partial slab has enough: returned ones may share cache
 *      lines with blocks that other threads hold.
 *      Invariant: used + length(free) == carved <= per_slab.
 *   3. The layer is entered only from the magazine layer's slow paths and moves objects in
 *      batches, under the cache's slab_lock (never a global lock): threads on different size
 *      classes never meet here, and cross-thread frees reach a slab only through magazines.
 *   4. Constructed state (object caches): objects leaving the slab layer are constructed,
 *      objects coming back are destructed, outside the lock (constructors may allocate).
 *   5. A slab whose objects have all come back is freed at once: the span goes to the arena,
 *      which decides when pages go back to the kernel. Partial slabs are served first-listed
 *      first, so the slabs that fill last are the ones that empty.
 *   Lock order: slab_lock, then the heap arena's lock, then metadata pools.
 */
#include "slab.h"
#include "meta.h"
#include "pagemap.h"
#include "report.h"

vmem_t heap_arena;

_Static_assert(sizeof(slab_t) <= 128, "slab descriptors are 128-byte records");
static meta_pool_t slab_pool = META_POOL(128);

static void slab_list(cache_t *cp, slab_t *s) {
  slab_t *head = cp->partial; /* circular list: head->prev is the tail */
  s->listed = true;
  if (!head) {
    cp->partial = s->next = s->prev = s;
    return;
  }
  s->next = head;
  s->prev = head->prev;
  head->prev->next = s;
  head->prev = s;
}

static void slab_unlist(cache_t *cp, slab_t *s) {
  s->listed = false;
  if (s->next == s) {
    cp->partial = NULL;
    return;
  }
  s->prev->next = s->next;
  s->next->prev = s->prev;
  if (cp->partial == s) cp->partial = s->next;
}

static slab_t *slab_create(cache_t *cp) {
  bool clean;
  void *span = vmem_alloc(&heap_arena, cp->span, cp->span, 0, &clean);
  if (!span) return NULL;
  slab_t *s = meta_alloc(&slab_pool);
  if (s) { /* fields first: the page-map entry publishes the slab */
    s->base = (uintptr_t)span;
    s->cache = cp;
  }
  if (!s || !pagemap_set((uintptr_t)span, cp->span, (uintptr_t)s | cp->tag)) {
    if (s) meta_free(&slab_pool, s);
    vmem_free(&heap_arena, span, cp->span);
    return NULL;
  }
  cp->slabs++;
  slab_list(cp, s);
  return s;
}

static void slab_destroy(cache_t *cp, slab_t *s) {
  if (s->listed) slab_unlist(cp, s);
  pagemap_set(s->base, cp->span, 0);
  vmem_free(&heap_arena, (void *)s->base, cp->span);
  meta_free(&slab_pool, s);
  cp->slabs--;
}

/* slab_of, and the object was handed out (cp->slab_lock held). */
static slab_t *slab_of_carved(cache_t *cp, const void *obj) {
  slab_t *s = slab_of(cp, obj);
  return s && ((uintptr_t)obj - s->base) / cp->size < s->carved ? s : NULL;
}

/* Returns unconstructed objects to their slabs. */
static void slab_return(cache_t *cp, void **objs, unsigned n) {
  lock_acquire(&cp->slab_lock);
  for (unsigned i = 0; i < n; i++) {
    slab_t *s = slab_of_carved(cp, objs[i]);
    if (!s) {
      lock_release(&cp->slab_lock);
      report_heap_error("invalid free", objs[i], "not an object magpie handed out");
    }
    ((void **)objs[i])[1] = s->free;
    s->free = objs[i];
    if (!s->listed) slab_list(cp, s);
    if (--s->used == 0) slab_destroy(cp, s);
  }
  cp->slab_objects_out -= n;
  lock_release(&cp->slab_lock);
}

/* Moves up to n - got objects of s to out[got...]: returned ones first, or never-used ones first
   when fresh; returns the new count. */
static unsigned slab_take(cache_t *cp, slab_t *s, void **out, unsigned got, unsigned n,
                          bool fresh) {
  for (int pass = 0; pass < 2; pass++, fresh = !fresh)
    if (fresh)
      while (got < n && s->carved < cp->per_slab)
        out[got++] = (void *)(s->base + (uintptr_t)s->carved++ * cp->size);
    else
      while (got < n && s->free) {
        out[got++] = s->free;
        s->free = ((void **)s->free)[1];
      }
  return got;
}

unsigned slab_alloc(cache_t *cp, void **out, unsigned n, bool run) {
  unsigned got = 0;
  lock_acquire(&cp->slab_lock);
  while (got < n) {
    slab_t *s = cp->partial;
    if (!s && !(s = slab_create(cp))) break;
    unsigned before = got;
    got = slab_take(cp, s, out, got, n, run && cp->per_slab - s->carved >= n - got);
    s->used += got - before;
    if (!s->free && s->carved == cp->per_slab) slab_unlist(cp, s);
  }
  cp->slab_objects_out += got;
  lock_release(&cp->slab_lock);
  if (cp->ctor)
    for (unsigned i = 0; i < got; i++)
      if (cp->ctor(out[i], cp->arg, 0) != 0) {
        slab_return(cp, out + i, got - i);
        return i;
      }
  return got;
}

void slab_free(cache_t *cp, void **objs, unsigned n) {
  if (cp->dtor)
    for (unsigned i = 0; i < n; i++)
      cp->dtor(objs[i], cp->arg);
  slab_return(cp, objs, n);
}

void slab_check(cache_t *cp) {
  lock_acquire(&cp->slab_lock);
  size_t listed = 0;
  slab_t *s = cp->partial;
  do {
    if (!s) break;
    uint32_t free_count = 0;
    for (void *o = s->free; o; o = ((void **)o)[1], free_count++)
      if (slab_of_carved(cp, o) != s) report_fatal("slab: free list holds a foreign object", o, 0);
    if (s->used + free_count != s->carved || s->carved > cp->per_slab || !s->listed ||
        s->base & (cp->span - 1) || s->next->prev != s)
      report_fatal("slab: descriptor accounting broken", (void *)s->base, s->used);
    if (pagemap_get(s->base + cp->span - 1) != ((uintptr_t)s | cp->tag))
      report_fatal("slab: page map does not point at the slab", (void *)s->base, 0);
    listed++;
    s = s->next;
  } while (s != cp->partial);
  if (listed > cp->slabs) report_fatal("slab: more listed slabs than held", NULL, listed);
  lock_release(&cp->slab_lock);
}
