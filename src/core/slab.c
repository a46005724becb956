/*
 * slab: spans cut into equal objects, one cache's objects per slab.
 *
 * Theory
 *   1. A slab is a span of cp->span bytes from the arena hugepage_arena names (the slab arena's
 *      huge pages packed with slabs of small objects, or the heap arena; the heap arena too when
 *      no whole huge page can be had, near the end of the address space), aligned to its size,
 *      with an
 *      out-of-band descriptor (from a metadata pool): user data never neighbours metadata.
 *      Every page of the span maps to the descriptor in the page map, tagged with the cache's
 *      size class, so free() finds an object's class in two loads.
 *   2. Objects are carved lazily: [0, carved) have been handed out at least once, the rest were
 *      never touched, so a fresh slab costs no page faults until used. Returned objects are
 *      marked in the descriptor's bitmap, not linked through themselves: a refill then takes
 *      them lowest address first without reading them (a list through cold objects is a
 *      chain of dependent cache misses), and the slab layer never writes user memory.
 *      Returned objects go out first. A request for a run (a thread's first refill of a class,
 *      mag.c theory 5) takes never-used objects first where the first partial slab has enough:
 *      returned ones may share cache lines with blocks that other threads hold.
 *      Invariant: used + nfree == carved <= per_slab, nfree == the bits set in map, all below
 *      carved, none in the words below scan.
 *   3. The layer is entered only from the magazine layer's slow paths and moves objects in
 *      batches, under the cache's slab_lock (never a global lock): threads on different size
 *      classes never meet here, and cross-thread frees reach a slab only through magazines.
 *   4. Constructed state (object caches): objects leaving the slab layer are constructed,
 *      objects coming back are destructed, outside the lock (constructors may allocate).
 *   5. A slab whose objects have all come back is freed at once: the span goes to the arena,
 *      which decides when pages go back to the kernel. Partial slabs are served first-listed
 *      first, so the slabs that fill last are the ones that empty.
 *   Lock order: fork.c's list (slab_lock, then the slab and heap arenas' locks, then metadata
 *   pools).
 */
#include "slab.h"
#include "hugepage.h"
#include "san_hooks.h"
#include "meta.h"
#include "pagemap.h"
#include "report.h"

vmem_t heap_arena;

/* Descriptors with bitmaps for up to 576, 1600 and SLAB_OBJECTS_MAX objects. */
#define SLAB_POOLS 3
static meta_pool_t slab_pools[SLAB_POOLS] = {META_POOL(128), META_POOL(256), META_POOL(640)};
_Static_assert(sizeof(slab_t) + SLAB_OBJECTS_MAX / 8 <= 640, "the largest bitmap fits");

/* Words in the bitmap of a slab of cp: one bit an object. */
static uint32_t slab_map_words(const cache_t *cp) {
  return (cp->per_slab + 63) / 64;
}

static meta_pool_t *slab_pool(const cache_t *cp) {
  size_t bytes = sizeof(slab_t) + slab_map_words(cp) * sizeof(uint64_t);
  for (unsigned i = 0; i < SLAB_POOLS; i++)
    if (bytes <= slab_pools[i].size) return &slab_pools[i];
  report_fatal("slab: more objects in a slab than its bitmap holds", cp, cp->per_slab);
}

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

static vmem_t *slab_arena_of(const slab_t *s) {
  return s->from_heap ? &heap_arena : &slab_arena;
}

static slab_t *slab_create(cache_t *cp) {
  bool clean;
  vmem_t *arena = hugepage_arena(cp->size);
  void *span = vmem_alloc(arena, cp->span, cp->span, 0, &clean);
  if (!span && arena != &heap_arena) /* no whole huge page to be had: any free span will do */
    span = vmem_alloc(arena = &heap_arena, cp->span, cp->span, 0, &clean);
  if (!span) return NULL;
  slab_t *s = meta_alloc(slab_pool(cp));
  if (s) { /* fields first: the page-map entry publishes the slab */
    s->base = (uintptr_t)span;
    s->cache = cp;
    s->from_heap = arena == &heap_arena;
  }
  if (!s || !pagemap_set((uintptr_t)span, cp->span, (uintptr_t)s | cp->tag)) {
    if (s) meta_free(slab_pool(cp), s);
    vmem_free(arena, span, cp->span);
    return NULL;
  }
  cp->slabs++;
  slab_list(cp, s);
  return s;
}

static void slab_destroy(cache_t *cp, slab_t *s) {
  if (s->listed) slab_unlist(cp, s);
  pagemap_set(s->base, cp->span, 0);
  vmem_free(slab_arena_of(s), (void *)s->base, cp->span);
  meta_free(slab_pool(cp), s);
  cp->slabs--;
}

/* Object obj's index in its slab s. */
static uint32_t slab_index(const cache_t *cp, const slab_t *s, const void *obj) {
  return (uint32_t)(((uintptr_t)obj - s->base) / cp->size);
}

/* Returns unconstructed objects to their slabs. */
static void slab_return(cache_t *cp, void **objs, unsigned n) {
  lock_acquire(&cp->slab_lock);
  for (unsigned i = 0; i < n; i++) {
    slab_t *s = slab_of(cp, objs[i]);
    uint32_t k = s ? slab_index(cp, s, objs[i]) : 0;
    bool foreign = !s || k >= s->carved;
    if (foreign || s->map[k / 64] >> k % 64 & 1) {
      lock_release(&cp->slab_lock);
      if (foreign) report_heap_error("invalid free", objs[i], "not an object magpie handed out");
      report_heap_error("double free", objs[i], "already back in its slab");
    }
    s->map[k / 64] |= (uint64_t)1 << k % 64;
    s->nfree++;
    if (k / 64 < s->scan) s->scan = k / 64;
    if (!s->listed) slab_list(cp, s);
    if (--s->used == 0) slab_destroy(cp, s);
  }
  cp->slab_objects_out -= n;
  lock_release(&cp->slab_lock);
}

/* Moves up to n - got objects of s to out[got...]: returned ones first (lowest address
   first), or never-used ones first when fresh; returns the new count. */
static unsigned slab_take(cache_t *cp, slab_t *s, void **out, unsigned got, unsigned n,
                          bool fresh) {
  for (int pass = 0; pass < 2; pass++, fresh = !fresh)
    if (fresh)
      while (got < n && s->carved < cp->per_slab)
        out[got++] = (void *)(s->base + (uintptr_t)s->carved++ * cp->size);
    else
      while (got < n && s->nfree) {
        uint64_t *w = &s->map[s->scan];
        if (*w == 0) {
          s->scan++;
          continue;
        }
        uint32_t k = s->scan * 64 + (uint32_t)__builtin_ctzll(*w);
        *w &= *w - 1;
        s->nfree--;
        out[got++] = (void *)(s->base + (uintptr_t)k * cp->size);
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
    if (!s->nfree && s->carved == cp->per_slab) slab_unlist(cp, s);
  }
  cp->slab_objects_out += got;
  lock_release(&cp->slab_lock);
  if (san_poisons()) /* a sanitized program's objects are poisoned while here (san_hooks.h) */
    for (unsigned i = 0; i < got; i++)
      san_unpoison(out[i], cp->size);
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
  if (san_poisons())
    for (unsigned i = 0; i < n; i++)
      san_poison(objs[i], cp->size);
  slab_return(cp, objs, n);
}

void slab_check(cache_t *cp) {
  lock_acquire(&cp->slab_lock);
  size_t listed = 0;
  slab_t *s = cp->partial;
  do {
    if (!s) break;
    uint32_t free_count = 0;
    for (uint32_t w = 0; w < slab_map_words(cp); w++) {
      uint64_t bits = s->map[w], lo = (uint64_t)w * 64; /* objects lo..lo+63 */
      uint64_t carved = s->carved <= lo        ? 0
                        : s->carved - lo >= 64 ? ~(uint64_t)0
                                               : ((uint64_t)1 << (s->carved - lo)) - 1;
      if ((bits & ~carved) || (w < s->scan && bits))
        report_fatal("slab: bitmap marks an object free that cannot be", (void *)s->base, w);
      free_count += (uint32_t)__builtin_popcountll(bits);
    }
    if (s->used + free_count != s->carved || free_count != s->nfree || s->carved > cp->per_slab ||
        !s->listed || s->base & (cp->span - 1) || s->next->prev != s)
      report_fatal("slab: descriptor accounting broken", (void *)s->base, s->used);
    if (pagemap_get(s->base + cp->span - 1) != ((uintptr_t)s | cp->tag))
      report_fatal("slab: page map does not point at the slab", (void *)s->base, 0);
    listed++;
    s = s->next;
  } while (s != cp->partial);
  if (listed > cp->slabs) report_fatal("slab: more listed slabs than held", NULL, listed);
  lock_release(&cp->slab_lock);
}
