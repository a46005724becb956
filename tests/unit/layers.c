/*
 * slab + depot + magazines, driven through magpie_* and the layers' own functions:
 *   - every class hands out aligned, disjoint objects; slab invariants hold (slab_check);
 *     after freeing everything and trimming, every slab and span is gone;
 *   - cross-thread frees (producer allocates, consumer frees, consumer exits) strand nothing;
 *   - the depot returns exactly the unneeded working set, and grows magazines on contention
 *     and when it trades them fast;
 *   - object caches construct on entry and destruct only when memory goes back;
 *   - two threads' first small objects never share a cache line, with each other or (when they
 *     first freed blocks another thread allocated) with that thread's blocks;
 *   - a thread's own loaded magazine, a pointer to its top between two end marks, fills and
 *     empties to exactly its capacity and gives its count back when it leaves;
 *   - the reaper takes the magazines of a thread idle for a whole interval, the loaded one
 *     too (fenced with membarrier), and the thread goes on allocating and freeing afterwards;
 *   - constructors and destructors may allocate, even inside a magazine miss;
 *   - a reaper looking again and again takes magazines from threads in the middle of their
 *     fast paths: no block is handed out twice, none is lost;
 *   - returned objects come back out of their slab lowest address first, and one returned twice
 *     is reported as a double free;
 *   - the free pages inside a slab go back (slab_give_back), read as zero, are counted hollow
 *     in the slab's huge page, and come back into use with their free objects marked again;
 *     they go back with the slab lock free, no object on them is handed out meanwhile, and
 *     one of them freed meanwhile is reported as a double free (the linker wraps
 *     os_purge_list_run: tests/unit/CMakeLists.txt);
 *   - slabs that empty keep their spans at hand in the CPU's stash, slabs made take them back,
 *     the arena fills a stash a batch at a time, and a trim empties them (slab.c theory 9);
 *   - a thread starts and exits while another holds the registry's lock, counted once;
 *   - a class the thread stopped allocating sends its cached blocks home within a few sweep
 *     intervals of misses elsewhere, its depot's too (a class of blocks over a page, its
 *     depot's only); a class it allocates keeps them; a depot others take from keeps its own.
 * Malloc's magazines are per thread here (percpu=0); tests/unit/percpu.c tests the per-CPU ones.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np, sched_getcpu */
#include "cache.h"
#include "depot.h"
#include "fastpath.h"
#include "mag.h"
#include "mag_impl.h"
#include "magpie.h"
#include "options.h"
#include "os.h"
#include "pagemap.h"
#include "hugepage.h"
#include "slab.h"
#include "slabs.h"
#include "unit.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* A thread that waits for a depot's lock (depot_wait) and says when it returned. */
typedef struct depot_waiter {
  cache_t *cp;
  int done;
} depot_waiter_t;

static void *depot_waiter(void *arg) {
  depot_waiter_t *w = arg;
  depot_wait(w->cp);
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

#define PER_CLASS 300
#define HANDOFF 20000

static void *handoff[HANDOFF];

static void *consumer(void *arg) {
  (void)arg;
  for (int i = 0; i < HANDOFF; i++) {
    UCHECK(*(uint32_t *)((char *)handoff[i] + 8) == (uint32_t)i);
    magpie_free(handoff[i]);
  }
  return NULL;
}

/* An idler fills its magazines of one class by freeing, sleeps until woken, then allocates and
   frees again (on magazines the reaper took meanwhile) and exits. */
#define IDLER_SIZE 256
#define IDLER_OBJS 400
static tcache_t *idler_cache;
static pthread_barrier_t idler_freed, idler_done;

static void idler_round(void) {
  static void *objs[IDLER_OBJS];
  for (int i = 0; i < IDLER_OBJS; i++) {
    UCHECK((objs[i] = magpie_malloc(IDLER_SIZE)) != NULL);
    memset(objs[i], i & 0xff, IDLER_SIZE);
  }
  for (int i = 0; i < IDLER_OBJS; i++) {
    UCHECK(((unsigned char *)objs[i])[IDLER_SIZE - 1] == (i & 0xff)); /* not handed out twice */
    magpie_free(objs[i]);
  }
}

static void *idler(void *arg) {
  (void)arg;
  idler_round();
  idler_cache = mag_tls;
  pthread_barrier_wait(&idler_freed);
  pthread_barrier_wait(&idler_done);
  idler_round();
  return NULL;
}

/* The rounds in the idler's loaded (prev false) or previous magazine of its class, or -1 for
   none (the sentinel). */
static int idler_rounds(bool prev) {
  tcache_t *tc = idler_cache;
  lock_acquire(&tc->lock);
  unsigned c = sc_of(IDLER_SIZE);
  mag_t *m = prev ? tc->own.prev[c] : mag_top_unload(tc->own.top[c]);
  int n = m == &mag_empty ? -1 : (int)m->n;
  lock_release(&tc->lock);
  return n;
}

/* A trader plays the owner's part in the reaper's window by hand: it fills both magazines of
   the idler's class, goes quiet for a look, then enters its fast path (fast_enter) and reads
   its magazines as the trade does (mag.c), before the reaper parks the loaded one. Swapping, it
   then waits for the park and trades after it, as a thread that read the loaded magazine just
   before the exchange does; holding, it stays inside until the reaper is done. Either way its two
   magazines must come out of the reaper where the owner left them, and none in a depot. */
static pthread_barrier_t trade_ready, trade_entered, trade_done;
static tcache_t *trade_cache;
static bool trade_looked; /* the reaper's second look is over */
static void **trade_top;  /* as the trader left them */
static mag_t *trade_prev;

static void *trader(void *arg) {
  bool swap = arg != NULL;
  unsigned c = sc_of(IDLER_SIZE);
  idler_round();
  tcache_t *tc = trade_cache = mag_tls;
  UCHECK(tc->own.top[c] != MAG_TOP_NONE && tc->own.prev[c] != &mag_empty);
  pthread_barrier_wait(&trade_ready); /* the reaper looks: this thread missed, it is not idle */
  pthread_barrier_wait(&trade_ready);
  void **top = fast_enter(tc, c); /* the trade's reads (mag.c) */
  mag_t *prev = tc->own.prev[c];
  pthread_barrier_wait(&trade_entered); /* the reaper looks again, and parks */
  if (swap) {
    while (__atomic_load_n(&tc->own.top[c], __ATOMIC_RELAXED) != MAG_TOP_NONE &&
           !__atomic_load_n(&trade_looked, __ATOMIC_ACQUIRE))
      ; /* preempted past a window that put the magazine back, it trades after the look */
    mag_t *m = mag_top_unload(top); /* the trade's stores */
    void **traded = mag_top_load(prev);
    __atomic_store_n(&tc->own.prev[c], m, __ATOMIC_RELAXED);
    __atomic_store_n(&tc->own.top[c], traded, __ATOMIC_RELAXED);
    trade_top = traded;
    trade_prev = m;
    fast_leave(tc);
    pthread_barrier_wait(&trade_done);
  } else {
    trade_top = top;
    trade_prev = prev;
    pthread_barrier_wait(&trade_done); /* the reaper is done: leave only now */
    fast_leave(tc);
  }
  pthread_barrier_wait(&trade_done);
  return NULL;
}

static void trade_in_window(bool swap) {
  cache_t *ic = &malloc_caches[sc_of(IDLER_SIZE)];
  pthread_t t;
  __atomic_store_n(&trade_looked, false, __ATOMIC_RELAXED);
  UCHECK(pthread_create(&t, NULL, trader, swap ? (void *)1 : NULL) == 0);
  pthread_barrier_wait(&trade_ready);
  mag_reclaim(false);
  pthread_barrier_wait(&trade_ready);
  pthread_barrier_wait(&trade_entered);
  lock_acquire(&ic->depot.lock);
  uint32_t full_before = ic->depot.nfull, empty_before = ic->depot.nempty;
  lock_release(&ic->depot.lock);
  mag_reclaim(false);
  __atomic_store_n(&trade_looked, true, __ATOMIC_RELEASE);
  pthread_barrier_wait(&trade_done);
  unsigned c = sc_of(IDLER_SIZE);
  UCHECK(trade_cache->own.top[c] == trade_top && trade_cache->own.prev[c] == trade_prev);
  lock_acquire(&ic->depot.lock);
  UCHECK(ic->depot.nfull == full_before && ic->depot.nempty == empty_before);
  lock_release(&ic->depot.lock);
  pthread_barrier_wait(&trade_done);
  UCHECK(pthread_join(t, NULL) == 0);
}

/* Workers replace small blocks (many rounds a magazine, so few misses) while a reaper looks at
   them in a loop: between two looks most workers have not missed, so their loaded magazines
   are parked, fenced and taken while they run. Then they allocate and free batches of up to
   three magazines' worth, which trade their loaded and previous magazines all the time
   (mag.c's trade), also in the reaper's window. */
#define REAPED_WORKERS 4
#define REAPED_OPS 200000
#define REAPED_SLOTS 64
#define REAPED_BATCH 96
static int reaped_done;

static void *reaped_worker(void *arg) {
  uint64_t rng = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 3;
  void *mine[REAPED_BATCH] = {0};
  for (int i = 0; i < REAPED_OPS; i++) {
    void **slot = &mine[unit_rand(&rng) % REAPED_SLOTS];
    if (*slot) unit_block_free(*slot);
    *slot = unit_block_new(&rng, 240);
  }
  for (int i = 0; i < REAPED_SLOTS; i++)
    if (mine[i]) unit_block_free(mine[i]);
  for (int i = 0; i < REAPED_OPS; i += REAPED_BATCH) {
    int n = 1 + (int)(unit_rand(&rng) % REAPED_BATCH);
    for (int k = 0; k < n; k++)
      mine[k] = unit_block_new(&rng, 16); /* one class */
    for (int k = 0; k < n; k++)
      unit_block_free(mine[(i / REAPED_BATCH) & 1 ? k : n - 1 - k]);
  }
  __atomic_add_fetch(&reaped_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Two threads' first objects of a fresh cache of 16-byte objects, taken while both are alive;
   in the passive case each first frees a block that the main thread allocated next to blocks
   it keeps (Hoard's cache-scratch). */
static magpie_cache_t *line_cache;
#define LINE_RUN 4 /* 16-byte objects in a line: a thread's first refill */
static void *line_first[2][LINE_RUN], *line_given[2];
static pthread_barrier_t line_both;

static void *line_taker(void *arg) {
  uintptr_t i = (uintptr_t)arg;
  if (line_given[i]) magpie_cache_free(line_cache, line_given[i]);
  for (int k = 0; k < LINE_RUN; k++)
    line_first[i][k] = magpie_cache_alloc(line_cache, MAGPIE_DEFAULT);
  pthread_barrier_wait(&line_both);
  for (int k = 0; k < LINE_RUN; k++)
    magpie_cache_free(line_cache, line_first[i][k]);
  return NULL;
}

/* Trades with a fresh depot of 4 KiB objects as thread `giver` gives full magazines (fake
   rounds) and thread `taker` takes them, a window's worth, then gives magazines until the depot
   keeps none: whether it kept any past DEPOT_FULL_BYTES_MAX (256 KiB). */
static bool depot_flow_keeps(uint32_t giver, uint32_t taker) {
  static cache_t depots[2];
  cache_t *dc = &depots[giver != taker];
  cache_setup(dc, "flow", 4096, PM_TAG_CACHE);
  mag_t *m = depot_empty_mag(dc, DEPOT_MAKE);
  for (int i = 0; i < 64; i++) { /* gives and takes, alternately: a window of both */
    m->n = m->cap;
    m->giver = giver;
    mag_t *empty = depot_free_exchange(dc, m, DEPOT_MAKE);
    UCHECK(empty && empty != m);
    m = depot_alloc_exchange(dc, empty, taker, 0);
    UCHECK(m && m->n == m->cap);
  }
  size_t kept = 0;
  for (;;) { /* gives only, until the depot sends one back */
    m->n = m->cap;
    m->giver = giver;
    mag_t *back = depot_free_exchange(dc, m, DEPOT_MAKE);
    if (back == m) break;
    kept += (size_t)m->n * dc->size;
    m = back;
  }
  return kept > ((size_t)256 << 10) + 64 * dc->size;
}

/* Returns an object to its slab twice (in a child: unit_in_child). */
static cache_t *double_cache;
static void slab_double_return(void *obj) {
  slab_free(double_cache, &obj, 1);
  slab_free(double_cache, &obj, 1);
}

/* The cache whose give-back os_purge_list_run watches: the purges it saw, and those that ran with
   its slab lock held. */
static cache_t *purge_watched;
static int purges, purges_locked;

/* Frees held (an object a give-back or refill of cp holds) in a child forked raw, without the
   fork handlers: reported as a double free. */
static cache_t *held_cache;
static void slab_free_held(void *obj) {
  slab_free(held_cache, &obj, 1);
}

static void expect_double_free(cache_t *cp, void *held) {
  char report[4096];
  held_cache = cp;
  int status = unit_in_child_how(slab_free_held, held, report, sizeof report, true);
  UCHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  UCHECK(strstr(report, "double free") != NULL);
}

void __real_os_purge_list_run(os_purge_list_t *list);
/* At the watched cache's first purge: an object taken meanwhile lies elsewhere, and freeing
   one that lies there (in a child) is a double free. */
void __wrap_os_purge_list_run(os_purge_list_t *list) {
  cache_t *cp = purge_watched;
  void *p = list->range[0].start;
  size_t size = list->range[0].size;
  if (cp && list->n && ++purges && !lock_try(&cp->slab_lock)) {
    purges_locked++;
  } else if (cp && list->n) {
    lock_release(&cp->slab_lock);
    if (purges == 1) {
      for (int run = 0; run < 2; run++) { /* a returned object, then a never-used one */
        void *q;
        UCHECK(slab_alloc(cp, &q, 1, run, 0) == 1);
        UCHECK((uintptr_t)q + cp->size <= (uintptr_t)p || (uintptr_t)q >= (uintptr_t)p + size);
        slab_free(cp, &q, 1);
      }
      slab_t *s = (slab_t *)(pagemap_get((uintptr_t)p) & ~PM_TAG_MASK);
      expect_double_free(cp, (void *)(s->base + ((uintptr_t)p - s->base) / cp->size * cp->size));
    }
  }
  __real_os_purge_list_run(list);
}

/* The cache whose refills os_populate watches as they take hollow chunks back into use: the
   calls it saw, those that ran with the slab lock held, and whether one is in progress. */
static cache_t *wake_watched;
static int wakes, wakes_locked, wake_depth;

int __real_os_populate(void *p, size_t size);
/* At the watched cache's first wake: an object taken meanwhile lies elsewhere (its own refill
   wakes another chunk, maybe sharing an object with these), and freeing an object held there
   (in a child) is a double free. */
int __wrap_os_populate(void *p, size_t size) {
  cache_t *cp = wake_watched;
  if (cp && !wake_depth++ && ++wakes && !lock_try(&cp->slab_lock)) {
    wakes_locked++;
  } else if (cp && wake_depth == 1) {
    lock_release(&cp->slab_lock);
    if (wakes == 1) {
      void *q;
      UCHECK(slab_alloc(cp, &q, 1, false, 0) == 1);
      UCHECK((uintptr_t)q + cp->size <= (uintptr_t)p || (uintptr_t)q >= (uintptr_t)p + size);
      slab_free(cp, &q, 1);
      slab_t *s = (slab_t *)(pagemap_get((uintptr_t)p) & ~PM_TAG_MASK);
      /* the last object starting there: the refill took the first free one */
      expect_double_free(
          cp, (void *)(s->base + ((uintptr_t)p + size - 1 - s->base) / cp->size * cp->size));
    }
  }
  wake_depth--;
  return __real_os_populate(p, size);
}

/* A slab carved to the middle of its second page, all but its first object free: the second
   page goes back, and no object is carved on it meanwhile (the wrapper above takes one). */
static void give_back_carving(void) {
  enum { N = 100 };
  cache_t *cp = (cache_t *)magpie_cache_create("carving", 64, 0, NULL, NULL, NULL, 0);
  UCHECK(cp != NULL && cp->per_slab > 2 * N);
  void *o[N];
  UCHECK(slab_alloc(cp, o, N, true, 0) == N);
  slab_t *s = (slab_t *)(pagemap_get((uintptr_t)o[0]) & ~PM_TAG_MASK);
  UCHECK(s->carved == N && (uintptr_t)o[N - 1] == s->base + (N - 1) * 64);
  slab_free(cp, o + 1, N - 1);
  purges = purges_locked = 0;
  purge_watched = cp;
  UCHECK(slab_give_back(cp) >= OS_PAGE);
  purge_watched = NULL;
  UCHECK(purges == 1 && purges_locked == 0 && s->carved >= 2 * OS_PAGE / 64);
  slab_check(cp);
  UCHECK(slab_alloc(cp, o + 1, N - 1, false, 0) == N - 1); /* the hollow page comes back in use */
  slab_check(cp);
  slab_free(cp, o, N);
  magpie_cache_destroy((magpie_cache_t *)cp);
}

/* Slabs of one's own (slab.c theory 8): two homes' refills take from slabs of their own, a
   home's free objects go to no other home, a slab given up is claimed by the next home that
   finds none of its own, one that fills up is no one's, and big blocks' slabs have no home. */
static void slab_homes(void) {
  enum { N = 8, A = 1, B = 2, C = 3 }; /* no thread's id, nor a CPU's home */
  cache_t *cp = &malloc_caches[sc_of(200)], *big = &malloc_caches[sc_of(1024)];
  magpie_trim(); /* no partial slab left of the class: A and B make theirs */
  unsigned owners = cp->owners;
  UCHECK(cp->per_slab > 4 * N && cp->partial == NULL && big->size > SLAB_HOME_MAX);
  void *a[N], *b[N], *x;
  UCHECK(slab_alloc(cp, a, N, false, A) == N && slab_alloc(cp, b, N, false, B) == N);
  slab_t *sa = slab_of(cp, a[0]), *sb = slab_of(cp, b[0]);
  UCHECK(sa && sb && sa != sb && sa->owner == A && sb->owner == B && cp->owners == owners + 2);
  UCHECK(slab_of(cp, a[N - 1]) == sa && slab_of(cp, b[N - 1]) == sb);
  slab_check(cp);
  slab_free(cp, b + 1, N - 1); /* B's to take again, not A's */
  UCHECK(slab_alloc(cp, &x, 1, false, A) == 1 && slab_of(cp, x) == sa && x != b[1]);
  slab_free(cp, &x, 1);
  slab_disown(cp, B);
  UCHECK(sb->owner == 0 && cp->owners == owners + 1);
  slab_check(cp);
  UCHECK(slab_alloc(cp, &x, 1, false, C) == 1 && x == b[1] && sb->owner == C);
  slab_free(cp, &x, 1);
  unsigned rest = cp->per_slab - N; /* A's slab to the last object: no one's */
  void **more = malloc((rest + 1) * sizeof *more);
  UCHECK(more && slab_alloc(cp, more, rest, false, A) == rest);
  UCHECK(sa->owner == 0 && !sa->listed && cp->owners == owners + 1);
  UCHECK(slab_alloc(cp, more + rest, 1, false, A) == 1);
  slab_t *next = slab_of(cp, more[rest]);
  UCHECK(next != sa && next != sb && next->owner == A && cp->owners == owners + 2);
  slab_check(cp);
  slab_free(cp, more, rest + 1);
  slab_free(cp, a, N);
  slab_free(cp, b, 1);
  free(more);
  slab_disown(cp, A);
  slab_disown(cp, C);
  UCHECK(cp->owners == owners);
  /* bigger blocks, and object caches' objects, have no homes */
  UCHECK(slab_alloc(big, &x, 1, false, A) == 1 && slab_of(big, x)->owner == 0);
  slab_free(big, &x, 1);
  magpie_cache_t *oc = magpie_cache_create("homes", 64, 0, NULL, NULL, NULL, 0);
  UCHECK(oc && slab_alloc((cache_t *)oc, &x, 1, false, A) == 1);
  UCHECK(slab_of((cache_t *)oc, x)->owner == 0);
  slab_free((cache_t *)oc, &x, 1);
  magpie_cache_destroy(oc);
}

/* The slab arena's bytes in use but for its quantum caches (in slabs and stashes), and its
   lock's acquisitions so far, this read's excluded. */
static size_t slab_arena_in_use(uint64_t *acquisitions) {
  lock_acquire(&slab_arena.lock);
  size_t in_use = slab_arena.in_use;
  for (size_t n = 1; n <= VMEM_QCACHE_MAX; n++)
    in_use -= slab_arena.qcache_n[n] * n * slab_arena.quantum;
  *acquisitions = slab_arena.lock.acquisitions - 1;
  lock_release(&slab_arena.lock);
  return in_use;
}

/* Takes n objects of cp from the slab layer (several slabs' worth), home none. */
static void slab_take_all(cache_t *cp, void **o, unsigned n) {
  for (unsigned got = 0, k; got < n; got += k)
    UCHECK((k = slab_alloc(cp, o + got, n - got, false, 0)) > 0);
}

/* Spans at hand (slab.c theory 9): slabs that empty leave their spans in the stash of the CPU
   the thread runs on, up to its room, the rest to the arena; slabs made take them there again,
   the arena filling an empty stash several at a time under one hold of its lock; a trim gives
   the stashed spans back. */
static void span_stash(void) {
  enum { SLABS = 16, ROOM = 8 };
  cpu_set_t all, one;
  UCHECK(sched_getaffinity(0, sizeof all, &all) == 0);
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  UCHECK(sched_setaffinity(0, sizeof one, &one) == 0); /* one stash throughout */
  magpie_cache_t *oc = magpie_cache_create("stash", 1000, 0, NULL, NULL, NULL, 0);
  cache_t *cp = (cache_t *)oc;
  UCHECK(oc && cp->span == (size_t)64 << 10 && hugepage_arena(cp->size) == &slab_arena);
  unsigned n = SLABS * cp->per_slab;
  void **o = malloc(n * sizeof *o);
  UCHECK(o != NULL);
  magpie_trim();
  uint64_t before, after;
  size_t base = slab_arena_in_use(&before);
  slab_take_all(cp, o, n);
  UCHECK(cp->slabs == SLABS);
  slab_free(cp, o, n); /* ROOM spans to the stash, the rest to the arena */
  UCHECK(cp->slabs == 0 && slab_arena_in_use(&before) == base + ROOM * cp->span);
  UCHECK(slab_stashed_bytes == ROOM * cp->span);
  slab_take_all(cp, o, n);
  size_t in_use = slab_arena_in_use(&after);
  UCHECK(cp->slabs == SLABS && in_use == base + SLABS * cp->span);
  UCHECK(after - before <= SLABS / ROOM + 1); /* the stash's ROOM, then batches */
  slab_free(cp, o, n);
  UCHECK(slab_arena_in_use(&after) == base + ROOM * cp->span);
  magpie_trim();
  UCHECK(slab_arena_in_use(&after) == base && slab_stashed_bytes == 0);
  magpie_cache_destroy(oc);
  free(o);
  UCHECK(sched_setaffinity(0, sizeof all, &all) == 0);
}

/* A depot keeps magazines by the CPU their giver ran on (depot.c theory 1): a taker gets the
   last one given on its CPU before those given on others (one list, last in first out, would
   give each the other's), and an empty one likewise. Needs two CPUs whose lists differ. */
static void depot_by_cpu(cache_t *cp) {
  cpu_set_t all, on[2];
  UCHECK(sched_getaffinity(0, sizeof all, &all) == 0);
  int cpu[2], n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &all) && (n == 0 || c % DEPOT_CPU_LISTS != cpu[0] % DEPOT_CPU_LISTS))
      cpu[n++] = c;
  if (n < 2) {
    printf("layers: depot_by_cpu needs two CPUs; skipped\n");
    return;
  }
  mag_t *m[2];
  for (int i = 0; i < 2; i++) {
    CPU_ZERO(&on[i]);
    CPU_SET(cpu[i], &on[i]);
    m[i] = depot_empty_mag(cp, DEPOT_MAKE);
    UCHECK(m[i] != NULL);
    m[i]->rounds[m[i]->n++] = magpie_cache_alloc((magpie_cache_t *)cp, MAGPIE_DEFAULT);
  }
  for (int i = 0; i < 2; i++) { /* full ones given on each CPU, the second last */
    UCHECK(sched_setaffinity(0, sizeof on[i], &on[i]) == 0);
    depot_put(cp, m[i]);
  }
  for (int i = 0; i < 2; i++) { /* each CPU's taker gets its own, emptied ones back the same */
    UCHECK(sched_setaffinity(0, sizeof on[i], &on[i]) == 0);
    mag_t *full = depot_alloc_exchange(cp, &mag_empty, 0, 0);
    UCHECK(full == m[i]);
    magpie_cache_free((magpie_cache_t *)cp, full->rounds[--full->n]);
    depot_put(cp, full);
  }
  for (int i = 0; i < 2; i++) {
    UCHECK(sched_setaffinity(0, sizeof on[i], &on[i]) == 0);
    UCHECK(depot_empty_mag(cp, 0) == m[i]);
  }
  for (int i = 0; i < 2; i++)
    depot_put(cp, m[i]);
  UCHECK(sched_setaffinity(0, sizeof all, &all) == 0);
}

/* A thread's slabs: its own while it runs (where it is homed, mag.c theory 10), shared once it
   exits, and in a child of fork, where the thread is gone. */
static bool tid_owns(cache_t *cp, uint32_t tid) {
  bool found = false;
  lock_acquire(&cp->slab_lock);
  slab_t *s = cp->owned;
  for (unsigned i = 0; i < cp->owners; i++, s = s->next)
    found |= s->owner == tid;
  lock_release(&cp->slab_lock);
  return found;
}

#define HOMED_SIZE 440 /* a class no other step allocates */
static pthread_barrier_t homed_owns, homed_forked;

static void *homed_thread(void *arg) {
  uint32_t *tid = arg;
  void *p = magpie_malloc(HOMED_SIZE);
  *tid = mag_tls->tid;
  UCHECK(p && mag_tls->homed && tid_owns(&malloc_caches[sc_of(HOMED_SIZE)], *tid));
  pthread_barrier_wait(&homed_owns);
  pthread_barrier_wait(&homed_forked);
  magpie_free(p);
  return NULL;
}

static void homed_thread_exits(void) {
  pthread_t t;
  uint32_t tid = 0;
  size_t few = opt.percpu_threads;
  opt.percpu_threads = (size_t)1 << 20; /* however many threads run now: homed */
  magpie_trim();                        /* no depot to refill from: the slab layer */
  UCHECK(pthread_barrier_init(&homed_owns, NULL, 2) == 0);
  UCHECK(pthread_barrier_init(&homed_forked, NULL, 2) == 0);
  UCHECK(pthread_create(&t, NULL, homed_thread, &tid) == 0);
  pthread_barrier_wait(&homed_owns);
  pid_t child = fork();
  if (child == 0) _exit(tid_owns(&malloc_caches[sc_of(HOMED_SIZE)], tid) ? 3 : 0);
  int status = -1;
  UCHECK(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status));
  UCHECK(WEXITSTATUS(status) == 0); /* 3: the child kept the gone thread's slab as its own */
  pthread_barrier_wait(&homed_forked);
  UCHECK(pthread_join(t, NULL) == 0);
  opt.percpu_threads = few;
  UCHECK(tid != 0 && !tid_owns(&malloc_caches[sc_of(HOMED_SIZE)], tid));
}

/* Gives back the free pages of cp's slabs with one object in 256 kept, checks what the slab
   and huge-page layers record, then takes every object out again and back. */
static void give_back_one(cache_t *cp) {
  enum { N = 2048 };
  static void *o[N];
  magpie_trim();
  unsigned got = 0;
  while (got < N) {
    unsigned n = slab_alloc(cp, o + got, N - got, false, 0);
    UCHECK(n > 0);
    got += n;
  }
  for (unsigned i = 0; i < N; i++)
    memset(o[i], 0x5a, cp->size);
  for (unsigned i = 0; i < N; i++)
    if (i % 256) slab_free(cp, &o[i], 1);
  size_t before = slab_hollow_bytes;
  purges = purges_locked = 0;
  purge_watched = cp;
  size_t given = slab_give_back(cp);
  purge_watched = NULL;
  UCHECK(purges > 0 && purges_locked == 0);
  /* the slabs of the N / 256 survivors stay, the others went back whole: half of the kept
     slabs' bytes at least is given back */
  size_t kept =
      (size_t)N * cp->size < N / 256 * cp->span ? (size_t)N * cp->size : N / 256 * cp->span;
  UCHECK(given >= kept / 2 && slab_hollow_bytes == before + given);
  UCHECK(slab_give_back(cp) == 0); /* nothing more: hollow chunks are not given twice */
  slab_check(cp);
  vmem_check(&slab_arena);
  vmem_check(&heap_arena);
  size_t zero_words = 0, words = 0; /* freed objects' words in kept slabs: zero when hollow */
  for (unsigned i = 0; i < N; i++)
    if (i % 256 && slab_of(cp, o[i]))
      for (size_t w = 0; w < cp->size / 8; w++, words++)
        zero_words += ((uint64_t *)o[i])[w] == 0;
  UCHECK(zero_words * 2 >= words);
  for (unsigned i = 0; i < N; i += 256)
    UCHECK(((unsigned char *)o[i])[cp->size - 1] == 0x5a); /* survivors untouched */
  wakes = wakes_locked = 0;
  wake_watched = cp->size * 2 <= OS_PAGE ? cp : NULL; /* two objects a chunk at least */
  for (unsigned i = 0; i < N; i++)
    if (i % 256) {
      UCHECK(slab_alloc(cp, &o[i], 1, false, 0) == 1);
      memset(o[i], 0x33, cp->size);
    }
  UCHECK(!wake_watched || (wakes > 0 && wakes_locked == 0));
  wake_watched = NULL;
  UCHECK(slab_hollow_bytes == before); /* every hollow chunk is back in use */
  slab_check(cp);
  vmem_check(&slab_arena);
  slab_free(cp, o, N);
  magpie_trim();
  UCHECK(slab_hollow_bytes == before);
}

/* Constructors and destructors that allocate: a thread's first object from such a cache runs
   the constructor inside the magazine layer's miss, which must not hold anything that malloc's
   own miss takes again. */
static int allocating_ctor(void *obj, void *arg, int flags) {
  (void)arg;
  (void)flags;
  void **slot = obj;
  *slot = magpie_malloc(3000); /* a class this thread has not used: a miss */
  return *slot ? 0 : -1;
}

static void freeing_dtor(void *obj, void *arg) {
  (void)arg;
  magpie_free(*(void **)obj);
}

static void *allocating_user(void *arg) {
  magpie_cache_t *cache = arg;
  void *objs[100];
  for (int i = 0; i < 100; i++)
    UCHECK((objs[i] = magpie_cache_alloc(cache, MAGPIE_DEFAULT)) && *(void **)objs[i]);
  for (int i = 0; i < 100; i++)
    magpie_cache_free(cache, objs[i]);
  return NULL;
}

/* A thread whose first allocation makes its tcache, then waits to be let go. */
static int starter_state; /* 1: allocated; 2: may exit */

static void *starter(void *arg) {
  (void)arg;
  void *p = magpie_malloc(48);
  UCHECK(p != NULL);
  __atomic_store_n(&starter_state, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n(&starter_state, __ATOMIC_ACQUIRE) != 2)
    os_sleep_ms(1);
  magpie_free(p);
  return NULL;
}

static void no_reap(bool alloc) {
  (void)alloc;
}

/* A thread starts (makes its tcache) while this one holds the registry's lock, as the reaper,
   a report or another thread's exit may: it takes none (mag.c), and the lock's next holder
   links it in, counted once; it exits while the lock is held, without waiting, and leaves the
   registry as the lock is let go. The reap a slow path may run (mag_miss_hook), which walks
   the registry, is kept out meanwhile. */
static void start_unlocked(void) {
  mag_totals_t before, after;
  mag_totals(&before);
  void (*reap)(bool) = mag_miss_hook;
  mag_miss_hook = no_reap;
  lock_acquire(&mag_registry_lock);
  pthread_t t;
  UCHECK(pthread_create(&t, NULL, starter, NULL) == 0);
  int waited = 0;
  while (__atomic_load_n(&starter_state, __ATOMIC_ACQUIRE) != 1 && waited++ < 5000)
    os_sleep_ms(1);
  bool started = __atomic_load_n(&starter_state, __ATOMIC_ACQUIRE) == 1;
  lock_release(&mag_registry_lock);
  UCHECK(started);
  mag_totals(&after);
  UCHECK(after.threads_ever == before.threads_ever + 1 &&
         after.threads_live == before.threads_live + 1);
  lock_acquire(&mag_registry_lock);
  __atomic_store_n(&starter_state, 2, __ATOMIC_RELEASE);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 5;
  int exited = pthread_timedjoin_np(t, NULL, &deadline);
  mag_registry_leave();
  if (exited != 0) UCHECK(pthread_join(t, NULL) == 0);
  UCHECK(exited == 0); /* the exit did not wait for the lock */
  mag_miss_hook = reap;
  mag_totals(&after);
  UCHECK(after.threads_ever == before.threads_ever + 1 &&
         after.threads_live == before.threads_live);
}

static int ctor_calls, dtor_calls;

static int obj_ctor(void *obj, void *arg, int flags) {
  (void)flags;
  UCHECK(arg == &ctor_calls);
  ((uint64_t *)obj)[0] = 0xC0FFEE;
  ((uint64_t *)obj)[1] = 0;
  ctor_calls++;
  return 0;
}

/* The full magazines in cp's depot, read under its lock. */
static uint32_t depot_fulls(cache_t *cp) {
  lock_acquire(&cp->depot.lock);
  uint32_t n = cp->depot.nfull;
  lock_release(&cp->depot.lock);
  return n;
}

/* 15. sweep (mag.c theory 9): while this thread misses in another class, a class it stopped
   allocating gives the blocks in its magazines and its depot back to their slabs within a few
   sweep intervals, and its slabs go; one whose slabs are not packed (blocks over a page) only
   its depot's; a class it still allocates from keeps its magazines; a depot keeps its
   magazines while threads take them. */
static void sweep_cold_class(void) {
  enum { COLD = 2000, BIG = 200, WARM = 64, BURST = 256 };
  static void *cold_blocks[COLD], *big_blocks[BIG], *warm_blocks[WARM], *burst[BURST];
  cache_t *cold = &malloc_caches[sc_of(48)], *warm = &malloc_caches[sc_of(80)];
  cache_t *big = &malloc_caches[sc_of(8192)];
  UCHECK(slab_packed(cold) && !slab_packed(big));
  magpie_trim();
  for (int i = 0; i < BIG; i++)
    UCHECK((big_blocks[i] = magpie_malloc(8192)) != NULL);
  for (int i = 0; i < BIG; i++)
    magpie_free(big_blocks[i]);
  uint32_t big_rounds = 0, big_after = 0;
  mag_top_find(mag_tls->own.top[big->id], &big_rounds);
  UCHECK(big_rounds > 0 && depot_fulls(big) > 0);
  for (int i = 0; i < COLD; i++)
    UCHECK((cold_blocks[i] = magpie_malloc(48)) != NULL);
  for (int i = 0; i < WARM; i++)
    UCHECK((warm_blocks[i] = magpie_malloc(80)) != NULL);
  for (int i = 0; i < COLD; i++)
    magpie_free(cold_blocks[i]); /* 96 KiB: the depot keeps what the magazines cannot */
  for (int i = 0; i < WARM; i++)
    magpie_free(warm_blocks[i]);
  UCHECK(unit_class_slabs(cold) > 0 && depot_fulls(cold) > 0);
  uint64_t start = os_now_ns(), deadline = start + 5000000000u;
  while ((unit_class_slabs(cold) > 0 || depot_fulls(big) > 0) && os_now_ns() < deadline) {
    magpie_free(magpie_malloc(80)); /* warm: allocated from on every round */
    for (int i = 0; i < BURST; i++) /* more than two magazines of 1 KiB blocks: misses */
      UCHECK((burst[i] = magpie_malloc(1024)) != NULL);
    for (int i = 0; i < BURST; i++)
      magpie_free(burst[i]);
  }
  UCHECK(unit_class_slabs(cold) == 0 && depot_fulls(cold) == 0);
  UCHECK(__atomic_load_n(&cold->swept, __ATOMIC_RELAXED) > 0);      /* counted for the statistics */
  UCHECK(os_now_ns() - start >= (uint64_t)opt.sweep_ms * 1000000u); /* not before an interval */
  uint32_t warm_rounds = 0, cold_rounds = 0;
  mag_top_find(mag_tls->own.top[warm->id], &warm_rounds);
  mag_top_find(mag_tls->own.top[cold->id], &cold_rounds);
  mag_top_find(mag_tls->own.top[big->id], &big_after);
  UCHECK(warm_rounds > 0 && cold_rounds == 0 && unit_class_slabs(warm) > 0);
  UCHECK(depot_fulls(big) == 0 && big_after == big_rounds);
  mag_check();
  magpie_trim();
  UCHECK(unit_total_slabs() == 0);

  /* the depot's half, at chosen times: it gives its full magazines back, and tells the thread
     it may give back its own, only after a whole interval in which no thread took one */
  cache_t *oc = (cache_t *)magpie_cache_create("sweep", 64, 0, NULL, NULL, NULL, 0);
  UCHECK(oc != NULL);
  void *objs[4]; /* all taken first: a miss of the cache would take a magazine put below */
  for (int i = 0; i < 4; i++)
    UCHECK((objs[i] = magpie_cache_alloc((magpie_cache_t *)oc, MAGPIE_DEFAULT)) != NULL);
  for (int k = 0; k < 2; k++) {
    mag_t *m = depot_mag_new(2);
    UCHECK(m != NULL);
    m->rounds[0] = objs[2 * k];
    m->rounds[1] = objs[2 * k + 1];
    m->n = 2;
    depot_put(oc, m);
  }
  uint64_t interval = 10000000u, t0 = os_now_ns();
  for (int step = 0; step < 5; step++) {
    if (step == 0 || step == 2) { /* a take (put back at once) */
      mag_t *m = depot_alloc_exchange(oc, &mag_empty, mag_tls->tid, 0);
      UCHECK(m && m->n == 2);
      depot_put(oc, m);
    }
    /* 0: a take since the last look; 1: half an interval without; 2: a take again; 3: a
       whole interval after it; 4: and one more look */
    static const uint64_t at[5] = {0, 5000000u, 10000001u, 20000002u, 20000003u};
    bool idle = depot_sweep(oc, t0 + at[step], interval);
    UCHECK(idle == (step >= 3) && depot_fulls(oc) == (step >= 3 ? 0 : 2));
  }
  UCHECK(unit_class_slabs(oc) == 0 && oc->swept == 4);
  magpie_cache_destroy((magpie_cache_t *)oc);
}

/* 16. big blocks (4 pages or more) coming back to their slabs give their pages but the first
   once the class's free blocks whose pages stayed would pass its budget (slab.c theory 7): the
   first blocks back keep theirs, the later ones read zero past their first page, which keeps
   what was written there (the free marker); taking them again zeroes the estimate. One block
   of each slab stays out, so that no slab empties. */
static void big_pages_given(void) {
  enum { N = 128 };
  static void *blocks[N];
  static bool stays[N];
  cache_t *cp = &malloc_caches[sc_of(32768)];
  size_t size = cp->size;
  UCHECK(size >= 4 * OS_PAGE && slab_pages_may_go);
  magpie_trim(); /* no block of the class out but these */
  UCHECK(slab_alloc(cp, blocks, N, false, 0) == N);
  for (int i = 0; i < N; i++) {
    memset(blocks[i], 0xA5, size);
    stays[i] = true;
    for (int j = 0; j < i && stays[i]; j++)
      stays[i] = slab_of(cp, blocks[j]) != slab_of(cp, blocks[i]);
  }
  lock_acquire(&cp->slab_lock);
  cp->free_resident = 0;
  lock_release(&cp->slab_lock);
  unsigned kept = 0, given = 0, back = 0;
  bool first_given = false;
  for (int i = 0; i < N; i++) {
    if (stays[i]) continue;
    uintptr_t a = (uintptr_t)blocks[i], page2 = (a & ~(uintptr_t)(OS_PAGE - 1)) + OS_PAGE;
    slab_free(cp, &blocks[i], 1);
    bool gave = !os_resident(page2, OS_PAGE);
    if (back++ == 0) first_given = gave;
    kept += !gave;
    given += gave;
    UCHECK(os_resident(a, 1) && *(unsigned char *)a == 0xA5);
    if (gave) /* zero from its second page to its last whole one */
      for (uintptr_t p = page2; p + OS_PAGE <= a + size; p += OS_PAGE)
        UCHECK(*(uint64_t *)p == 0 && *(uint64_t *)(p + OS_PAGE - 8) == 0);
  }
  /* the budget: 1 MiB and an eighth of the blocks out, which shrink as they come back */
  UCHECK(!first_given && given > 0 && kept * size >= ((size_t)1 << 20) &&
         kept * size <= ((size_t)1 << 20) + N * size / 8 + size);
  unsigned out = 0;
  for (int i = 0; i < N; i++) /* the blocks that stayed out, first */
    if (stays[i]) blocks[out++] = blocks[i];
  UCHECK(slab_alloc(cp, blocks + out, back, false, 0) == back && cp->free_resident == 0);
  slab_free(cp, blocks, out + back);
  magpie_trim();
}

static void obj_dtor(void *obj, void *arg) {
  (void)arg;
  UCHECK(((uint64_t *)obj)[0] == 0xC0FFEE);
  dtor_calls++;
}

int main(int argc, char **argv) {
  (void)argc;
  unit_options(argv, "reaper=0,percpu=0");
  UCHECK(!mag_percpu());
  /* 1. every class, all objects distinct and aligned, then everything back */
  static void *blocks[SC_COUNT + 1][PER_CLASS];
  for (unsigned c = 1; c <= SC_COUNT; c++)
    for (int i = 0; i < PER_CLASS; i++) {
      size_t size = sc_size(c);
      void *p = blocks[c][i] = magpie_malloc(size);
      UCHECK(p && ((uintptr_t)p & 15) == 0 && magpie_usable_size(p) == size);
      memset(p, (int)c, size);
    }
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    slab_check(&malloc_caches[c]);
    for (int i = 0; i < PER_CLASS; i++) {
      unsigned char *p = blocks[c][i];
      UCHECK(p[0] == (unsigned char)c && p[sc_size(c) - 1] == (unsigned char)c);
      magpie_free(p);
    }
  }
  UCHECK(unit_total_slabs() > 0);
  magpie_trim();
  for (unsigned c = 1; c <= SC_COUNT; c++)
    slab_check(&malloc_caches[c]);
  UCHECK(unit_total_slabs() == 0 && slab_arena.in_use == 0 && heap_arena.in_use == 0);
  /* how far contention may grow each class's magazines (cache.c theory 2): 256 KiB of objects
     and 256 rounds (2 rounds at least), or for blocks of 128 bytes and less 64 KiB and 1024
     rounds */
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    size_t size = sc_size(c), max = malloc_caches[c].depot.cap_max;
    size_t bytes = size <= 128 ? (size_t)64 << 10 : (size_t)256 << 10;
    size_t rounds = size <= 128 ? 1024 : 256;
    UCHECK((max & (max - 1)) == 0 && max <= rounds && (max * size <= bytes || max == 2));
    UCHECK(max == rounds || 2 * max * size > bytes || max < malloc_caches[c].depot.cap * 2);
  }
  UCHECK(malloc_caches[sc_of(64)].depot.cap_max == 1024 &&
         malloc_caches[sc_of(128)].depot.cap_max == 512 &&
         malloc_caches[sc_of(1024)].depot.cap_max == 256);

  /* 2. producer/consumer: the consumer's magazines go to the depot when it exits */
  for (int i = 0; i < HANDOFF; i++) {
    handoff[i] = magpie_malloc(24 + (size_t)(i % 7) * 40);
    *(uint32_t *)((char *)handoff[i] + 8) = (uint32_t)i;
  }
  pthread_t t;
  UCHECK(pthread_create(&t, NULL, consumer, NULL) == 0 && pthread_join(t, NULL) == 0);
  mag_check(); /* the consumer's magazines in the depot, this thread's own in its pairs */
  magpie_trim();
  mag_check();
  UCHECK(unit_total_slabs() == 0);

  /* 3. object cache: construct on entry, keep state across free/alloc, destruct on reap */
  cache_t *cp = (cache_t *)magpie_cache_create("unit", 40, 64, obj_ctor, obj_dtor, &ctor_calls, 0);
  UCHECK(cp && cp->size == 64);
  static void *objs[1000];
  for (int i = 0; i < 1000; i++) {
    objs[i] = magpie_cache_alloc((magpie_cache_t *)cp, MAGPIE_DEFAULT);
    UCHECK(objs[i] && ((uintptr_t)objs[i] & 63) == 0 && ((uint64_t *)objs[i])[0] == 0xC0FFEE);
  }
  UCHECK(ctor_calls >= 1000 && dtor_calls == 0);
  ((uint64_t *)objs[999])[1] = 7;
  magpie_cache_free((magpie_cache_t *)cp, objs[999]);
  void *again = magpie_cache_alloc((magpie_cache_t *)cp, MAGPIE_DEFAULT);
  UCHECK(again == objs[999] && ((uint64_t *)again)[1] == 7); /* LIFO, state kept */
  for (int i = 0; i < 1000; i++)
    magpie_cache_free((magpie_cache_t *)cp, objs[i]);
  UCHECK(dtor_calls == 0); /* freed objects stay constructed in the magazines */
  mag_cache_drain(cp);     /* this thread's magazines to the depot */
  uint32_t held = cp->depot.nfull;
  UCHECK(held > 0);
  depot_reap(cp, false); /* first interval: the minimum was 0, nothing is excess yet */
  UCHECK(cp->depot.nfull == held && dtor_calls == 0);
  depot_reap(cp, false); /* unused for a whole interval: all returned and destructed */
  UCHECK(cp->depot.nfull == 0 && dtor_calls > 0);

  /* 4. contention grows the magazines, up to cap_max */
  uint32_t cap = cp->depot.cap;
  cp->depot.contended = 1000;
  depot_reap(cp, false);
  UCHECK(cp->depot.cap == 2 * cap || cp->depot.cap == cp->depot.cap_max);
  mag_t *m = depot_empty_mag(cp, DEPOT_MAKE);
  UCHECK(m && m->cap == cp->depot.cap && m->n == 0);
  depot_put(cp, m);

  /* 5. a depot trading magazines fast grows them without contention (it checks its rate every
     few hundred exchanges: a preempted window only delays the growth) */
  cap = cp->depot.cap = 2;
  m = depot_empty_mag(cp, DEPOT_MAKE);
  UCHECK(m && m->cap == 2);
  for (uint32_t i = 0; i < 2; i++)
    m->rounds[m->n++] = magpie_cache_alloc((magpie_cache_t *)cp, MAGPIE_DEFAULT);
  for (int i = 0; i < 1 << 16 && cp->depot.cap == cap; i++) {
    mag_t *empty = depot_free_exchange(cp, m, DEPOT_MAKE); /* m goes in full */
    UCHECK(empty && empty->n == 0);
    m = depot_alloc_exchange(cp, empty, 0, 0);
    UCHECK(m && m->n == 2);
  }
  UCHECK(cp->depot.cap == 2 * cap);
  /* 5a. from 32 rounds on, a hot depot grows only where the threads that give magazines take
     them back (up to 8 KiB of objects: 128 rounds of this cache's 64 bytes), not where they go
     to others (a producer's to its consumers) */
  UCHECK(cp->depot.hot_max == 128);
  for (uint32_t taker = 1; taker <= 2; taker++) { /* m's giver is 1 (below) */
    cap = cp->depot.cap = 32;
    for (int i = 0; i < 1 << 14 && cp->depot.cap == cap; i++) {
      m->giver = 1;
      mag_t *empty = depot_free_exchange(cp, m, DEPOT_MAKE);
      UCHECK(empty && empty->n == 0);
      m = depot_alloc_exchange(cp, empty, taker, 0);
      UCHECK(m && m->n == 2);
    }
    UCHECK(cp->depot.cap == (taker == 1 ? 2 * cap : cap));
  }
  depot_put(cp, m);

  /* 5b. past its small bound a depot keeps full magazines only while threads pass them to other
     threads (depot.c theory 4): fake rounds in depots nothing reaps */
  UCHECK(depot_flow_keeps(1, 1) == false); /* one thread gives and takes its own */
  UCHECK(depot_flow_keeps(1, 2) == true);  /* thread 1 gives, thread 2 takes */

  depot_by_cpu(cp);

  /* 6. magazines (written by their thread on every call, up to the end mark above their last
     round) never share a cache line */
  for (uint32_t k = 1; k <= 256; k *= 2) {
    mag_t *a = depot_mag_new(k), *b = depot_mag_new(k);
    UCHECK(a && b && ((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0);
    uintptr_t a_end = (uintptr_t)&a->rounds[k + 1], b_end = (uintptr_t)&b->rounds[k + 1];
    UCHECK(((uintptr_t)a >= b_end || (uintptr_t)b >= a_end) &&
           ((a_end - 1) >> 6 != (uintptr_t)b >> 6) && ((b_end - 1) >> 6 != (uintptr_t)a >> 6));
    depot_put(cp, a);
    depot_put(cp, b);
  }

  /* 6a. a caller under a CPU's lock (mag_free_room with drain) makes no magazine (a new one
     may map a metadata chunk: mag_percpu.c theory 5): where the depot has no empty one of its
     size, the free goes to the slab layer and *drain asks for one, which depot_stock then
     gives the depot, for the next such call */
  static mag_t *spare[256];
  unsigned nspare = 0;
  while (nspare < 256 && cp->depot.nempty > 0) /* empty ones of another size are destroyed */
    if ((spare[nspare] = depot_empty_mag(cp, 0)) != NULL) nspare++;
  UCHECK(cp->depot.nempty == 0);
  void *obj = magpie_cache_alloc((magpie_cache_t *)cp, MAGPIE_DEFAULT);
  mag_pair_t pair = {&mag_empty, &mag_empty};
  mag_t *drain = NULL;
  UCHECK(obj && !mag_free_room(cp, &pair, obj, &drain, DEPOT_TRY));
  UCHECK(drain == &mag_empty && pair.loaded == &mag_empty && cp->depot.nempty == 0);
  depot_stock(cp);
  UCHECK(cp->depot.nempty == 1);
  drain = NULL;
  UCHECK(!mag_free_room(cp, &pair, obj, &drain, DEPOT_TRY)); /* obj goes home; the pair gets one */
  UCHECK(drain == NULL && pair.loaded != &mag_empty && cp->depot.nempty == 0);
  mag_t *full = depot_empty_mag(cp, DEPOT_MAKE);
  UCHECK(full);
  while (full->n < full->cap)
    full->rounds[full->n++] = magpie_cache_alloc((magpie_cache_t *)cp, MAGPIE_DEFAULT);
  pair.prev = full;
  UCHECK(!mag_free_room(cp, &pair, obj, &drain, DEPOT_TRY)); /* no empty one to trade it for */
  UCHECK(drain == &mag_empty && pair.prev == full && full->n == full->cap);

  /* 6c. nor does it wait for the depot's lock (mag_percpu.c theory 5): held, each exchange
     says DEPOT_BUSY and changes nothing, and the try counts toward the depot's growth */
  depot_stock(cp);
  uint64_t contended = cp->depot.contended;
  lock_acquire(&cp->depot.lock);
  drain = NULL;
  UCHECK(!mag_free_room(cp, &pair, obj, &drain, DEPOT_TRY)); /* full prev: an exchange */
  UCHECK(drain == DEPOT_BUSY && pair.prev == full && full->n == full->cap);
  mag_pair_t none = {&mag_empty, &mag_empty};
  drain = NULL;
  UCHECK(!mag_free_room(cp, &none, obj, &drain, DEPOT_TRY)); /* no pair: an empty one */
  UCHECK(drain == DEPOT_BUSY && none.loaded == &mag_empty);
  mag_pair_t dry = {pair.loaded, pair.loaded}; /* both empty: a full one wanted */
  mag_t *fill = NULL;
  UCHECK(pair.loaded->n == 0);
  UCHECK(mag_alloc_refill(cp, &dry, &fill, DEPOT_TRY) == NULL && fill == DEPOT_BUSY);
  UCHECK(dry.loaded == pair.loaded && dry.prev == pair.loaded);
  UCHECK(cp->depot.contended == contended + 3 && cp->depot.nempty == 1);
  lock_release(&cp->depot.lock);
  depot_wait(cp); /* free: returns at once, and leaves it free */
  UCHECK(lock_try(&cp->depot.lock));
  /* held by another: returns only after it is let go, without taking it */
  static depot_waiter_t waiter;
  waiter.cp = cp;
  pthread_t wt;
  UCHECK(pthread_create(&wt, NULL, depot_waiter, &waiter) == 0);
  struct timespec two_ms = {0, 2000000};
  nanosleep(&two_ms, NULL);
  UCHECK(!__atomic_load_n(&waiter.done, __ATOMIC_ACQUIRE));
  lock_release(&cp->depot.lock);
  UCHECK(pthread_join(wt, NULL) == 0 && waiter.done);
  UCHECK(lock_try(&cp->depot.lock));
  lock_release(&cp->depot.lock);
  drain = NULL;
  UCHECK(mag_free_room(cp, &pair, obj, &drain, DEPOT_TRY)); /* free now: full for empty */
  UCHECK(drain == NULL && pair.loaded != full && pair.prev != full && cp->depot.nempty == 0);
  obj = pair.loaded->rounds[--pair.loaded->n];
  full = depot_alloc_exchange(cp, &mag_empty, 0, 0);
  UCHECK(full && full->n == full->cap);
  depot_put(cp, pair.prev);
  magpie_cache_free((magpie_cache_t *)cp, obj);
  mag_drain(cp, full);
  depot_put(cp, full);
  depot_put(cp, pair.loaded);
  while (nspare > 0)
    depot_put(cp, spare[--nspare]);

  /* 6b. a thread's own loaded magazine is its top between two end marks (mag.c theory 8): one
     of 8 rounds holding 3 takes 5 pushes and then gives 8 pops, and gives its count back
     when it leaves the thread, at either end or between */
  static tcache_t t8; /* a thread cache nobody runs on */
  static uint64_t rounds8[8][2] __attribute__((aligned(16)));
  mag_t *m8 = depot_mag_new(8);
  UCHECK(m8);
  for (m8->n = 0; m8->n < 3; m8->n++)
    m8->rounds[m8->n] = rounds8[m8->n];
  t8.own.top[1] = mag_top_load(m8);
  int pushes = 0, pops = 0;
  while (pushes < 100 && fast_own_push(&t8, 1, t8.own.top[1], rounds8[3 + pushes % 5]))
    pushes++;
  UCHECK(pushes == 5 && mag_top_unload(t8.own.top[1]) == m8 && m8->n == 8);
  UCHECK(fast_own_pop(&t8, 1, t8.own.top[1]) == rounds8[7] && mag_top_unload(t8.own.top[1]) == m8 &&
         m8->n == 7);
  for (pops = 1; pops < 100 && fast_own_pop(&t8, 1, t8.own.top[1]); pops++) {
  }
  UCHECK(pops == 8 && mag_top_unload(t8.own.top[1]) == m8 && m8->n == 0);
  UCHECK(t8.own.allocs[1] == 8 && t8.own.frees[1] == 5);
  UCHECK(mag_top_unload(MAG_TOP_NONE) == &mag_empty);
  depot_put(cp, m8);

  magpie_cache_destroy((magpie_cache_t *)cp);
  UCHECK(ctor_calls == dtor_calls);

  /* 7. the first refills (a line's worth) of two threads' small objects never share a cache line
     with each other (active false sharing) nor with blocks the main thread keeps, when each first
     freed one of the main thread's (passive) */
  pthread_barrier_init(&line_both, NULL, 2);
  for (int passive = 0; passive < 2; passive++) {
    line_cache = magpie_cache_create("line", 16, 16, NULL, NULL, NULL, 0);
    void *kept[2] = {NULL, NULL};
    if (passive) {
      for (int i = 0; i < 2; i++)
        UCHECK((line_given[i] = magpie_cache_alloc(line_cache, MAGPIE_DEFAULT)) != NULL);
      for (int i = 0; i < 2; i++)
        UCHECK((kept[i] = magpie_cache_alloc(line_cache, MAGPIE_DEFAULT)) != NULL);
      UCHECK((uintptr_t)kept[0] >> 6 == (uintptr_t)line_given[0] >> 6);
    }
    pthread_t lt[2];
    for (uintptr_t i = 0; i < 2; i++)
      UCHECK(pthread_create(&lt[i], NULL, line_taker, (void *)i) == 0);
    for (int i = 0; i < 2; i++)
      UCHECK(pthread_join(lt[i], NULL) == 0);
    for (int k = 0; k < LINE_RUN; k++)
      for (int l = 0; l < LINE_RUN; l++) {
        uintptr_t a = (uintptr_t)line_first[0][k], b = (uintptr_t)line_first[1][l];
        UCHECK(a && b && a >> 6 != b >> 6);
        UCHECK(!passive ||
               (a >> 6 != (uintptr_t)kept[0] >> 6 && b >> 6 != (uintptr_t)kept[0] >> 6));
      }
    for (int i = 0; i < 2 && !passive; i++) /* a refill is handed out lowest address first */
      for (int k = 0; k + 1 < LINE_RUN; k++)
        UCHECK((uintptr_t)line_first[i][k] < (uintptr_t)line_first[i][k + 1]);
    for (int i = 0; i < 2 && passive; i++)
      magpie_cache_free(line_cache, kept[i]);
    line_given[0] = line_given[1] = NULL;
    magpie_cache_destroy(line_cache);
  }

  /* 8. an idle thread's magazines, loaded and previous, go to the depot after a quiet interval
     where the fence works (without it, the owner may be trading them: they stay) */
  pthread_barrier_init(&idler_freed, NULL, 2);
  pthread_barrier_init(&idler_done, NULL, 2);
  UCHECK(pthread_create(&t, NULL, idler, NULL) == 0);
  pthread_barrier_wait(&idler_freed);
  cache_t *ic = &malloc_caches[sc_of(IDLER_SIZE)];
  UCHECK(idler_rounds(true) > 0 && idler_rounds(false) > 0);
  mag_reclaim(false); /* the idler missed since the last look: it is not idle yet */
  UCHECK(idler_rounds(true) > 0 && idler_rounds(false) > 0);
  /* 8a. a thread in its slow path holds its lock: a reap passes it by instead of waiting (held
     here by this thread, a reap that waited would never return) */
  lock_acquire(&idler_cache->lock);
  mag_reclaim(false);
  lock_release(&idler_cache->lock);
  UCHECK(idler_rounds(true) > 0 && idler_rounds(false) > 0);
  lock_acquire(&ic->depot.lock);
  uint32_t full_before = ic->depot.nfull;
  lock_release(&ic->depot.lock);
  bool fence = os_fence_threads_register();
  if (!fence)
    unit_skip("unit_layers",
              "part 8 with the loaded magazine taken (checked: both stay): the "
              "kernel refuses membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)");
  mag_reclaim(false); /* no miss since: its magazines go */
  UCHECK((idler_rounds(true) == -1) == fence && (idler_rounds(false) == -1) == fence);
  lock_acquire(&ic->depot.lock);
  UCHECK(ic->depot.nfull == full_before + 2 * fence);
  lock_release(&ic->depot.lock);
  pthread_barrier_wait(&idler_done);
  UCHECK(pthread_join(t, NULL) == 0);
  /* 8b. all: a thread that just missed gives its magazines too (malloc_trim, an allocation
     that found no memory) */
  UCHECK(pthread_create(&t, NULL, idler, NULL) == 0);
  pthread_barrier_wait(&idler_freed);
  mag_reclaim(false); /* it missed since the last look: not idle, its magazines stay */
  UCHECK(idler_rounds(true) > 0 && idler_rounds(false) > 0);
  mag_reclaim(true);
  UCHECK((idler_rounds(true) == -1) == fence && (idler_rounds(false) == -1) == fence);
  pthread_barrier_wait(&idler_done);
  UCHECK(pthread_join(t, NULL) == 0);
  /* 9. constructors and destructors may allocate and free, misses included */
  magpie_cache_t *ac = magpie_cache_create("alloc", 64, 0, allocating_ctor, freeing_dtor, NULL, 0);
  UCHECK(ac && pthread_create(&t, NULL, allocating_user, ac) == 0 && pthread_join(t, NULL) == 0);
  magpie_cache_destroy(ac);

  /* 10. a slab hands returned objects out again lowest address first, without reading them,
     and reports one returned twice */
  {
    cache_t *sc = (cache_t *)magpie_cache_create("order", 48, 0, NULL, NULL, NULL, 0);
    UCHECK(sc != NULL);
    void *o[8], *back[8];
    UCHECK(slab_alloc(sc, o, 8, false, 0) == 8);
    for (int i = 1; i < 8; i += 2) /* return 1, 3, 5, 7: a list would give them back 7 first */
      slab_free(sc, &o[i], 1);
    UCHECK(slab_alloc(sc, back, 4, false, 0) == 4);
    for (int i = 0; i < 4; i++)
      UCHECK(back[i] == o[2 * i + 1]);
    char report[4096];
    double_cache = sc;
    int status = unit_in_child(slab_double_return, o[0], report, sizeof report);
    UCHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    UCHECK(strstr(report, "double free") && strstr(report, "already back in its slab"));
    slab_free(sc, o, 8);
    slab_check(sc);
    magpie_cache_destroy((magpie_cache_t *)sc);
  }

  /* 11. an owner inside its fast path while the reaper parks: trading its magazines after
     the park (they stay, traded), or still inside after the fence (they come back) */
  if (os_fence_threads_register()) {
    pthread_barrier_init(&trade_ready, NULL, 2);
    pthread_barrier_init(&trade_entered, NULL, 2);
    pthread_barrier_init(&trade_done, NULL, 2);
    trade_in_window(true);
    trade_in_window(false);
  } else {
    unit_skip("unit_layers",
              "part 11 (an owner inside its fast path while the reaper parks): "
              "the kernel refuses membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)");
  }

  /* 12. magazines taken from running threads: nothing handed out twice, nothing lost */
  magpie_trim();
  pthread_t rw[REAPED_WORKERS];
  for (uintptr_t i = 0; i < REAPED_WORKERS; i++)
    UCHECK(pthread_create(&rw[i], NULL, reaped_worker, (void *)i) == 0);
  unsigned long looks = 0;
  while (__atomic_load_n(&reaped_done, __ATOMIC_ACQUIRE) < REAPED_WORKERS) {
    mag_reclaim(false);
    looks++;
  }
  for (int i = 0; i < REAPED_WORKERS; i++)
    UCHECK(pthread_join(rw[i], NULL) == 0);
  magpie_trim();
  UCHECK(unit_total_slabs() == 0);

  /* 13. pages given back inside slabs, for classes on 4 KiB chunks (the slab arena) and one of
     spans over 256 KiB (the heap arena, chunks of span/64) */
  static const size_t hollow_sizes[] = {64, 96, 40000}; /* 96: objects across two chunks */
  for (size_t k = 0; k < 3; k++)
    give_back_one(&malloc_caches[sc_of(hollow_sizes[k])]);
  give_back_carving();
  slab_homes();
  homed_thread_exits();
  span_stash();

  /* 14. a thread starts while another holds the registry's lock: it takes none */
  start_unlocked();

  sweep_cold_class();
  big_pages_given();

  printf("layers: ok (%d objects constructed and destructed, %lu looks of the reaper)\n",
         ctor_calls, looks);
  return unit_exit();
}
