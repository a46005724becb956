/*
 * mag_check: the magazine layer's invariants, checked by magpie_verify and the unit tests.
 *   1. A magazine is in one place at most: one slot of a CPU's pair, of the calling thread's
 *      pair, or one depot list. (Two places means two owners: rounds handed out twice, a
 *      magazine freed while held, a depot list looping through itself.)
 *   2. A pair's loaded magazine is the sentinel only while its previous one is too (mag.h):
 *      the slow paths put an emptied or filled previous magazine back to the depot only where
 *      a real one is loaded.
 *   3. A magazine holds at most cap rounds; the sentinel holds none and has no room; a depot's
 *      full list holds magazines with rounds, its empty list magazines without, as many as its
 *      counts say.
 *   4. A loaded magazine, a CPU's or the calling thread's own, lies between its two end marks,
 *      its top at most cap rounds above the lower one (mag.c theory 8).
 * What moves under locks is read with all of them held at once, so that nothing moves between
 * two reads: the caller's tcache lock, every CPU's, every depot's (front/fork.c's order). Other
 * threads trade their own pairs without a lock: invariant 2, which no trade can break, is
 * checked on them under their own locks, one at a time; 1, 3 and 4 on the caller's pairs and
 * the CPUs' (whose sequences move a loaded magazine's top, never its marks) only.
 */
#include "depot.h"
#include "inject.h"
#include "mag_impl.h"
#include "os.h"
#include "report.h"

/* The magazines seen so far: an open-addressing set in a mapping of its own (nothing here
   may allocate: the allocator's locks are held). */
typedef struct mag_seen {
  mag_t **slot;
  size_t mask;
} mag_seen_t;

static void mag_seen_add(mag_seen_t *s, mag_t *m) {
  if (m == &mag_empty) {
    if (m->n || m->cap) report_fatal("magazine layer: the sentinel holds rounds", m, m->n);
    return;
  }
  if (m->n > m->cap) report_fatal("magazine layer: a magazine holds more than it can", m, m->n);
  for (size_t i = ((uintptr_t)m >> 6) & s->mask;; i = (i + 1) & s->mask) {
    if (s->slot[i] == m) report_fatal("magazine layer: a magazine is in two places", m, 0);
    if (!s->slot[i]) {
      s->slot[i] = m;
      return;
    }
  }
}

/* Checks pair t, and adds its magazines to s unless s is NULL (another thread's pair, which
   its owner may be trading: relaxed loads). */
static void mag_check_pair(mag_seen_t *s, mag_pair_t *t) {
  mag_t *loaded = __atomic_load_n(&t->loaded, __ATOMIC_RELAXED);
  mag_t *prev = __atomic_load_n(&t->prev, __ATOMIC_RELAXED);
  if (loaded == &mag_empty && prev != &mag_empty)
    report_fatal("magazine layer: a pair has the sentinel loaded beside a magazine", prev, 0);
  if (s) {
    mag_seen_add(s, loaded);
    mag_seen_add(s, prev);
  }
}

/* The loaded magazine m, found from its lower end mark, has its upper one above its last
   possible round and no more rounds than it can hold (n: as found from its top). */
static void mag_check_marks(const mag_t *m, uint32_t n) {
  if (m != &mag_empty && (n > m->cap || m->rounds[m->cap] != (void *)((uintptr_t)m | 1)))
    report_fatal("magazine layer: a loaded magazine's end marks are broken", m, n);
}

/* Checks class c's own pair of thread tc as mag_check_pair does. The calling thread's (s set)
   also for its loaded magazine's end marks (mag.c theory 8): the magazine the lower one names
   has its upper one above its last possible round, and no more rounds than it can hold.
   Another thread's loaded magazine, which its owner may be working on, is not read. */
static void mag_check_own(mag_seen_t *s, tcache_t *tc, unsigned c) {
  void **top = __atomic_load_n(&tc->own.top[c], __ATOMIC_RELAXED);
  mag_t *prev = __atomic_load_n(&tc->own.prev[c], __ATOMIC_RELAXED);
  if (!s) {
    if (top == MAG_TOP_NONE && prev != &mag_empty)
      report_fatal("magazine layer: a pair has the sentinel loaded beside a magazine", prev, 0);
    return;
  }
  mag_t *m = mag_top_unload(top);
  mag_check_marks(m, m->n);
  mag_pair_t t = {m, prev};
  mag_check_pair(s, &t);
}

/* Marks the magazines on cp's depot's full lists (each with rounds), or its empty lists (each
   with none), seen, and checks that they number as many as counted. */
static void mag_check_depot_lists(mag_seen_t *s, const cache_t *cp, bool full) {
  const depot_t *d = &cp->depot;
  uint32_t count = full ? d->nfull : d->nempty, found = 0;
  for (unsigned i = 0; i < DEPOT_CPU_LISTS; i++)
    for (mag_t *m = full ? d->full[i] : d->empty[i]; m && found <= count; m = m->next, found++) {
      if (full && m->n == 0) report_fatal("depot: an empty magazine on a full list", m, cp->size);
      if (!full && m->n != 0)
        report_fatal("depot: a magazine with rounds on an empty list", m, m->n);
      mag_seen_add(s, m);
    }
  if (found != count)
    report_fatal(full ? "depot: the full lists are not as long as counted"
                      : "depot: the empty lists are not as long as counted",
                 d, found);
}

static void mag_check_depot(mag_seen_t *s, cache_t *cp) {
  mag_check_depot_lists(s, cp, true);
  mag_check_depot_lists(s, cp, false);
}

void mag_check(void) {
  tcache_t *self = mag_tls;
  bool own = self != &tcache_boot && self != &tcache_dead && !self->cpus;
  mag_registry_enter(); /* invariant 2 on every other thread's own pairs */
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry; tc = tc->next) {
    if (tc == self || tc->cpus) continue;
    lock_acquire(&tc->lock);
    for (unsigned c = 1; c <= SC_COUNT; c++)
      mag_check_own(NULL, tc, c);
    lock_release(&tc->lock);
  }
  mag_registry_leave();

  if (own) lock_acquire(&self->lock);
  unsigned ncpus = mag_cpu_lock_all();            /* records set up after this are not checked */
  size_t mags = 2 * (SC_COUNT + 1) * (ncpus + 1); /* the pairs, then the lists */
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    lock_acquire(&malloc_caches[c].depot.lock);
    mags += malloc_caches[c].depot.nfull + malloc_caches[c].depot.nempty;
  }
  INJECT_LOCK_FORGET(); /* the check maps and fills its table: a test's faults, not a crowd's */
  size_t cap = 64;
  while (cap < 2 * mags)
    cap *= 2;
  mag_seen_t seen = {os_map(cap * sizeof(mag_t *)), cap - 1};
  if (!seen.slot) report_fatal("magazine layer: no memory to check it", NULL, cap);
  for (unsigned i = 0; i < ncpus; i++)
    for (unsigned c = 1; c <= SC_COUNT; c++) {
      uint32_t n = 0;
      mag_t *m = mag_top_find(__atomic_load_n(&mag_cpu(i)->mags[c].top, __ATOMIC_RELAXED), &n);
      mag_check_marks(m, n);
      mag_check_pair(&seen, &(mag_pair_t){m, mag_cpu(i)->mags[c].prev});
    }
  for (unsigned c = 1; c <= SC_COUNT && own; c++)
    mag_check_own(&seen, self, c);
  for (unsigned c = 1; c <= SC_COUNT; c++)
    mag_check_depot(&seen, &malloc_caches[c]);
  for (unsigned c = SC_COUNT; c >= 1; c--)
    lock_release(&malloc_caches[c].depot.lock);
  mag_cpu_unlock_all(ncpus);
  if (own) lock_release(&self->lock);
  os_unmap(seen.slot, cap * sizeof(mag_t *));
}
