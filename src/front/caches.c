/*
 * caches: the caches as a whole - malloc's size classes and the public object caches - and
 * what is done to all of them at once: bring-up, reaping, trimming, reclaiming, fork.
 *
 * Theory
 *   1. A cache is a slab layer plus a depot (cache.h). malloc's 96 size classes are static
 *      caches without constructors; magpie_cache_create makes object caches with them, whose
 *      slabs carry PM_TAG_CACHE in the page map so free() refuses their objects.
 *   2. Each cache is set up by core/cache.c (its slab geometry and magazine size).
 *   3. Reaping: at most once per reap_ms, each depot returns the magazines its working set did
 *      not need to the slabs (empty slabs go to their arena) and the arenas purge their dirty
 *      pages above `retain`, whole free huge pages first (hugepage.c theory 4); then a request
 *      for a heap profile is looked for (debug/prof_write.c): one failed open when there is
 *      none. Until the heap maps REAPER_START_BYTES, the first slow path to notice reaps; after
 *      that a background thread (the reaper) does, so that memory also goes back while the
 *      program is idle: when no slow path has run for REAPER_IDLE_TICKS intervals, it purges
 *      every dirty page; after each reap it collapses dense huge pages (hugepage.c theory 3).
 *      Small programs never get the thread, nor do programs that have run no thread of their
 *      own (a thread of magpie's would surprise them: unshare(CLONE_NEWUSER) needs a
 *      single-threaded process, and glibc's fork is async-signal-safe only in one, fork.c
 *      theory 3), unless the live view asks for it (publish_ms) or option reaper=2 does, nor
 *      does the child of a multithreaded fork; option reaper=0 keeps it away altogether. Only an
 *      allocation's slow path starts it, never a free's: glibc frees a dead thread's TLS inside
 *      pthread_join with the lock of its cache of thread stacks held, which pthread_create
 *      takes, so a free there that started the thread would wait on itself.
 *      cache_trim gives back everything free at once; cache_reclaim, after an allocation found
 *      no memory, gives back every cached object and wholly free span for one more try. Both
 *      take every thread's and CPU's magazines, not only the idle ones': a thread that is busy
 *      allocating may hold the free blocks that pin a span. Reaps run one at a time
 *      (cache_reap_lock): the magazines a reap has taken are on their way to a depot or to
 *      the slabs outside every other lock, and a trim that met the reaper's reap halfway would
 *      miss them, so trim and reclaim wait for a reap under way; a periodic reap that finds one
 *      leaves the work to it (nor does a slow path in a signal handler that interrupted a reap
 *      wait for its own thread).
 *   4. Object-cache ids index the threads' slot tables (mag_slots.c); ids are reused after destroy.
 *   Lock order: the one list in fork.c.
 */
#include "caches.h"
#include "depot.h"
#include "export.h"
#include "hugepage.h"
#include "inject.h"
#include "init.h"
#include "mag.h"
#include "memcheck_mode.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "pagemap.h"
#include "prof.h"
#include "report.h"
#include "san_hooks.h"
#include "slab.h"
#include "stats.h"

#include <errno.h>
#include <string.h>

#define OBJECT_SIZE_MAX ((size_t)1 << 20)   /* object caches: spans of 8 such objects are 8 MiB */
#define OBJECT_ALIGN_MAX ((size_t)64 << 10) /* spans are aligned to at least this */

static lock_t cache_reap_lock = LOCK_INIT; /* one reap at a time (theory 3) */
static lock_t cache_list_lock = LOCK_INIT;
static cache_t *cache_list;                 /* object caches (cache_list_lock) */
static bool cache_id_used[MAG_CACHE_SLOTS]; /* (cache_list_lock) */
static meta_pool_t cache_pool = META_POOL(sizeof(cache_t));
static uint64_t cache_last_reap; /* os_now_ns of the last reap (atomic) */
static uint64_t cache_last_slow; /* os_now_ns of a recent slow path (atomic) */
static int reaper_state;         /* REAPER_NONE, _RUNNING or _INLINE (atomic) */

#define REAPER_START_BYTES ((size_t)32 << 20) /* heaps smaller than this never get a thread */
#define REAP_TICK_MISSES 8  /* magazine misses per look at the clock, per thread */
#define REAPER_IDLE_TICKS 2 /* quiet intervals before every dirty page goes */
#define REAPER_OPT_SINGLE 2 /* reaper=2: the thread in single-threaded programs too */
enum { REAPER_NONE, REAPER_RUNNING, REAPER_INLINE }; /* _INLINE: slow paths reap, no thread */

void cache_init(void) {
  mag_miss_hook = cache_reap_tick;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    cache_setup(&malloc_caches[c], "malloc", sc_size(c), c);
    malloc_caches[c].id = c;
  }
  /* depot.c theory 6, slab.c's locks */
  INJECT_QUIET("depot", &malloc_caches[0].depot.lock, SC_COUNT + 1, sizeof(cache_t));
  INJECT_QUIET("slab", &malloc_caches[0].slab_lock, SC_COUNT + 1, sizeof(cache_t));
}

/* Returns unneeded magazines (all of them when everything) and purges down to keep_dirty;
   a reap that keeps nothing gives back the free pages inside malloc's slabs too (slab.c theory
   6; not in debug or memcheck mode, which keep records in free blocks: slab_pages_may_go), and
   one that keeps nothing or takes everything the spans the CPUs keep at hand (slab.c theory
   9). */
static size_t cache_reap(bool everything, size_t keep_dirty) {
  if (everything)
    lock_acquire(&cache_reap_lock);
  else if (!lock_try(&cache_reap_lock))
    return 0; /* a reap under way does the work (theory 3) */
  mag_reclaim(everything);
  size_t given = 0;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    depot_reap(&malloc_caches[c], everything);
    if (keep_dirty == 0) { /* quiet: every home's slabs shared again, their pages may go */
      slab_disown(&malloc_caches[c], 0);
      given += slab_give_back(&malloc_caches[c]);
    }
  }
  lock_acquire(&cache_list_lock);
  for (cache_t *cp = cache_list; cp; cp = cp->next)
    depot_reap(cp, everything);
  lock_release(&cache_list_lock);
  if (everything || keep_dirty == 0) slab_stash_flush();
  given += hugepage_reap(keep_dirty, everything);
  lock_release(&cache_reap_lock);
  return given;
}

/* Reaps every reap_ms and publishes the live statistics every publish_ms (stats_live.c), waking for
   whichever is sooner. */
static void *reaper_main(void *arg) {
  (void)arg;
  size_t nap = opt.publish_ms && opt.publish_ms < opt.reap_ms ? opt.publish_ms : opt.reap_ms;
  uint64_t period = (uint64_t)opt.reap_ms * 1000000u, last = os_now_ns();
  stats_publish(last); /* starts the first snapshot's clock, if no miss has (stats_live.c) */
  for (;;) {
    os_sleep_ms(nap);
    uint64_t now = os_now_ns(), quiet = now - __atomic_load_n(&cache_last_slow, __ATOMIC_RELAXED);
    if (now - last >= period - period / 8) { /* the coarse clock may read a little early */
      last = now;
      cache_reap(false, quiet > period * REAPER_IDLE_TICKS ? 0 : opt.retain);
      hugepage_tick();
      prof_poll_request();
    }
    stats_publish(now);
  }
  return NULL;
}

static void reaper_start(void) {
  int expected = REAPER_NONE;
  if (__atomic_compare_exchange_n(&reaper_state, &expected, REAPER_RUNNING, false, __ATOMIC_RELAXED,
                                  __ATOMIC_RELAXED) &&
      !os_thread_start(reaper_main, "magpie-reaper"))
    __atomic_store_n(&reaper_state, REAPER_INLINE, __ATOMIC_RELAXED);
}

/* What a tick does once the clock is read: starts the reaper (alloc: on an allocation's slow
   path, theory 3), or reaps and publishes here. */
static void cache_tick_now(bool alloc) {
  uint64_t now = os_now_ns(), period = (uint64_t)opt.reap_ms * 1000000u;
  if (now - __atomic_load_n(&cache_last_slow, __ATOMIC_RELAXED) > period / 4)
    __atomic_store_n(&cache_last_slow, now, __ATOMIC_RELAXED); /* rarely: a shared line */
  int state = __atomic_load_n(&reaper_state, __ATOMIC_RELAXED);
  if (state == REAPER_RUNNING) return;
  if (alloc && opt.reaper && state == REAPER_NONE &&
      ((os_mapped_bytes() > REAPER_START_BYTES &&
        (os_program_threaded() || opt.reaper >= REAPER_OPT_SINGLE)) ||
       opt.publish_ms)) {
    reaper_start();
    return;
  }
  uint64_t last = __atomic_load_n(&cache_last_reap, __ATOMIC_RELAXED);
  if (now - last >= period && __atomic_compare_exchange_n(&cache_last_reap, &last, now, false,
                                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    cache_reap(false, opt.retain);
    prof_poll_request();
  }
  stats_publish(now);
}

/* The system calls of a tick (the reaper's start, the reap, the profile request's file, the
   live area) leave the program's errno as it was: free, and a malloc that succeeds, never
   change it. */
void cache_reap_tick(bool alloc) {
  static __thread unsigned misses; /* the clock is read once per REAP_TICK_MISSES misses */
  if (misses++ % REAP_TICK_MISSES) return;
  int saved = errno;
  cache_tick_now(alloc);
  errno = saved;
}

size_t cache_trim(void) {
  magpie_init(); /* malloc_trim may come first */
  mag_flush_self();
  return cache_reap(true, 0);
}

bool cache_reclaim(size_t size) {
  if (size > os_mapped_bytes()) return false; /* all magpie holds could not make room for it */
  mag_flush_self();
  return cache_reap(true, SIZE_MAX) > 0; /* spans released: purging frees no address space */
}

void cache_each_object_cache(void (*fn)(cache_t *cp, void *arg), void *arg) {
  lock_acquire(&cache_list_lock);
  for (cache_t *cp = cache_list; cp; cp = cp->next)
    fn(cp, arg);
  lock_release(&cache_list_lock);
}

/* ---- the public object-cache API ---- */

MAGPIE_EXPORT magpie_cache_t *magpie_cache_create(const char *name, size_t size, size_t align,
                                                  magpie_ctor_t *ctor, magpie_dtor_t *dtor,
                                                  void *arg, int flags) {
  (void)flags; /* no creation flags are defined yet */
  if (align == 0) align = 16;
  if (size == 0 || size > OBJECT_SIZE_MAX || (align & (align - 1)) || align > OBJECT_ALIGN_MAX) {
    errno = EINVAL;
    return NULL;
  }
  magpie_init();
  if (align < 16) align = 16;
  cache_t *cp = meta_alloc(&cache_pool);
  if (!cp) {
    errno = ENOMEM;
    return NULL;
  }
  cache_setup(cp, name ? name : "anonymous", (size + align - 1) & ~(align - 1), PM_TAG_CACHE);
  cp->object_size = size;
  cp->ctor = ctor;
  cp->dtor = dtor;
  cp->arg = arg;
  lock_acquire(&cache_list_lock);
  cp->id = MAG_CACHE_SLOTS;
  for (unsigned i = 0; i < MAG_CACHE_SLOTS && cp->id == MAG_CACHE_SLOTS; i++)
    if (!cache_id_used[i]) cp->id = i;
  if (cp->id < MAG_CACHE_SLOTS) cache_id_used[cp->id] = true;
  cp->next = cache_list;
  cache_list = cp;
  lock_release(&cache_list_lock);
  return (magpie_cache_t *)cp;
}

/* The calling thread's magazines of cp when it has them already (the fast paths below). */
static inline thread_mags_t *cache_slot(const cache_t *cp) {
  cache_slot_t *slots = mag_tls->slots; /* NULL on tcache_boot and tcache_dead */
  return slots && cp->id < MAG_CACHE_SLOTS && slots[cp->id].cache == cp ? &slots[cp->id].own : NULL;
}

MAGPIE_EXPORT void *magpie_cache_alloc(magpie_cache_t *cache, int flags) {
  cache_t *cp = (cache_t *)cache;
  thread_mags_t *s = cache_slot(cp);
  if (MP_LIKELY(s && s->mags.loaded->n)) {
    STAT_ADD(s->count.allocs, 1);
    return s->mags.loaded->rounds[--s->mags.loaded->n];
  }
  if (memcheck_on) memcheck_quiet(); /* a constructor writes to memory not yet handed out */
  void *obj = mag_cache_alloc(cp);
  if (!obj && cache_reclaim(cp->size)) obj = mag_cache_alloc(cp);
  if (memcheck_on) {
    memcheck_loud();
    memcheck_served(obj, cp->object_size, true); /* constructed: defined */
  }
  if (obj && san_poisons()) { /* the stride's end, past the size asked for, stays poisoned */
    san_poison(obj, cp->size);
    san_unpoison(obj, cp->object_size);
  }
  if (!obj) {
    if (flags & MAGPIE_NOFAIL)
      report_fatal("magpie_cache_alloc failed with MAGPIE_NOFAIL", cp, cp->size);
    errno = ENOMEM;
  }
  return obj;
}

MAGPIE_EXPORT void magpie_cache_free(magpie_cache_t *cache, void *obj) {
  cache_t *cp = (cache_t *)cache;
  thread_mags_t *s = cache_slot(cp);
  mag_t *m = s ? s->mags.loaded : NULL;
  if (MP_LIKELY(m && m->n < m->cap && slab_of(cp, obj))) {
    STAT_ADD(s->count.frees, 1);
    m->rounds[m->n++] = obj;
    return;
  }
  if (!obj) return;
  if (!memcheck_on) {
    mag_cache_free(cp, obj); /* the slow path checks obj again, and reports */
    return;
  }
  memcheck_freed(obj);
  memcheck_quiet(); /* the destructor reads the object memcheck now keeps from the program */
  mag_cache_free(cp, obj);
  memcheck_loud();
}

MAGPIE_EXPORT void magpie_cache_destroy(magpie_cache_t *cache) {
  cache_t *cp = (cache_t *)cache;
  if (!cp) return;
  lock_acquire(&cache_list_lock);
  for (cache_t **link = &cache_list; *link; link = &(*link)->next)
    if (*link == cp) {
      *link = cp->next;
      break;
    }
  lock_release(&cache_list_lock);
  mag_cache_drain(cp);
  depot_reap(cp, true);
  lock_acquire(&cache_list_lock);
  if (cp->id < MAG_CACHE_SLOTS) cache_id_used[cp->id] = false;
  lock_release(&cache_list_lock);
  if (cp->slabs) /* live objects: keep their memory (and the descriptor their slabs name) */
    report_warning("magpie_cache_destroy: objects still allocated, memory kept, in cache ",
                   cp->name);
  else
    meta_free(&cache_pool, cp);
}

/* ---- fork ---- */

static void cache_lock_one(cache_t *cp) {
  lock_acquire(&cp->depot.lock);
  lock_acquire_settled(&cp->slab_lock, &cp->giving_back); /* slab.c theory 6 */
}

static void cache_unlock_one(cache_t *cp) {
  lock_release(&cp->slab_lock);
  lock_release(&cp->depot.lock);
}

static void cache_init_locks(cache_t *cp) {
  if (cp->giving_back) /* prepare waited for them (slab.c theory 6) */
    report_fatal("fork: the child inherited slab pages half given back", cp, cp->giving_back);
  lock_init(&cp->slab_lock);
  lock_init(&cp->depot.lock);
}

static void cache_for_all(void (*fn)(cache_t *)) {
  for (unsigned c = 1; c <= SC_COUNT; c++)
    fn(&malloc_caches[c]);
  for (cache_t *cp = cache_list; cp; cp = cp->next)
    fn(cp);
}

void cache_fork_prepare(void) {
  lock_acquire(&cache_reap_lock); /* the child gets no reap half done */
  lock_acquire(&cache_list_lock);
  mag_fork_prepare();
  cache_for_all(cache_lock_one);
  lock_acquire_settled(&slab_arena.lock, &slab_arena.unlocked);
  lock_acquire_settled(&heap_arena.lock, &heap_arena.unlocked);
  meta_fork_prepare();
}

void cache_fork_parent(void) {
  meta_fork_parent();
  lock_release(&heap_arena.lock);
  lock_release(&slab_arena.lock);
  cache_for_all(cache_unlock_one);
  mag_fork_parent();
  lock_release(&cache_list_lock);
  lock_release(&cache_reap_lock);
}

void cache_fork_child(void) {
  meta_fork_child();
  if (heap_arena.unlocked || slab_arena.unlocked) /* prepare waited for them (vmem.c theory 10) */
    report_fatal("fork: the child inherited pages half given back", NULL, heap_arena.unlocked);
  lock_init(&heap_arena.lock);
  lock_init(&slab_arena.lock);
  slab_stash_fork_child();
  cache_for_all(cache_init_locks);
  /* Threads are not copied by fork. The child of a multithreaded process may only call
     async-signal-safe functions until it execs (POSIX; ThreadSanitizer kills it otherwise), so
     there magpie starts no thread of its own: its slow paths reap instead. The registry does
     not show every thread (one that never allocated, or only from per-CPU magazines), so
     glibc's word that the parent ran threads counts too. */
  bool others = mag_fork_child();
  for (unsigned c = 1; c <= SC_COUNT; c++) /* the homes' threads are gone: their slabs shared */
    slab_disown(&malloc_caches[c], 0);
  if (others || reaper_state == REAPER_RUNNING || os_program_threaded())
    reaper_state = REAPER_INLINE;
  lock_init(&cache_list_lock);
  lock_init(&cache_reap_lock);
}
