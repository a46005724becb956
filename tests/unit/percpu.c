/*
 * The per-CPU magazines (mag_percpu.c, rseq.h), driven through magpie_* and the layers' functions:
 *   - with glibc's rseq area and percpu_threads=1 (set in main), the first thread keeps its
 *     own magazines and every later one uses the CPUs'; the CPUs' records are set up (and
 *     their pages touched) only when the first of those takes them;
 *   - threads moved between CPUs all the time (a mover thread changes their affinity) while
 *     they allocate, write, hand blocks to each other and free: no block is handed out twice
 *     (each carries its owner's pattern, checked before it is freed), and none is lost (after
 *     everything is freed and trimmed, no slab is left);
 *   - every allocation and free is counted, in the workers' counts-only tcaches;
 *   - the reaper leaves a CPU's magazines alone while the CPU misses, and takes both of them,
 *     the loaded one too (fenced with membarrier), once it has been quiet for an interval;
 *   - a CPU's first refill of 16-byte blocks hands out one block of each cache line before a
 *     second of any, so threads taking turns on the CPU do not share lines;
 *   - a worker's 32-bit counts are folded into the totals before they can wrap;
 *   - a thread whose working set crosses a CPU's loaded magazine's edge back and forth trades
 *     the CPU's two magazines without taking its lock: no miss;
 *   - the magazine layer's invariant checker (mag_check.c) passes on what each part leaves, and
 *     aborts, in a child, on a CPU pair with the sentinel loaded beside a magazine and on a
 *     magazine both in a CPU's pair and on a depot list.
 * Exits 77 (skipped, unit.h) where glibc registered no rseq area; and, after the rest has passed,
 * where membarrier cannot fence rseq: magpie then leaves CPUs' loaded magazines in place, and the
 * checks that they are taken are skipped.
 *   unit_percpu own: the same on magpie's own rseq area (percpu=2), run where glibc registers
 * none (glibc.pthread.rseq=0), as before glibc 2.35: each thread that takes the CPUs' magazines
 * registers the area itself (os_fence.c theory 2). Skipped only where the kernel refuses rseq.
 */
#define _GNU_SOURCE
#include "cache.h"
#include "depot.h"
#include "mag_impl.h"
#include "magpie.h"
#include "os.h"
#include "rseq.h"
#include "sizeclass.h"
#include "slabs.h"
#include "unit.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sched.h>
#include <string.h>

#define WORKERS 8
#define OPS 150000
#define SLOTS 64
#define SHARED 256
#define QUIET_SIZE 3000 /* a class nothing else here uses */

static size_t objects_out(cache_t *cp) {
  lock_acquire(&cp->slab_lock);
  size_t n = cp->slab_objects_out;
  lock_release(&cp->slab_lock);
  return n;
}

static void *shared[SHARED]; /* blocks passed between workers (atomic exchange) */
static pthread_t workers[WORKERS];
static int workers_done;

static void *worker(void *arg) {
  magpie_free(magpie_malloc(1)); /* sets the thread up */
  UCHECK(mag_tls->cpus != NULL);
  uint64_t rng = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  void *mine[SLOTS] = {0};
  for (int i = 0; i < OPS; i++) {
    uint64_t r = unit_rand(&rng);
    void **slot = r & 1 ? &mine[(r >> 8) % SLOTS] : &shared[(r >> 8) % SHARED];
    void *old = __atomic_exchange_n(slot, unit_block_new(&rng, 2048), __ATOMIC_ACQ_REL);
    if (old) unit_block_free(old);
  }
  for (int i = 0; i < SLOTS; i++)
    if (mine[i]) unit_block_free(mine[i]);
  __atomic_add_fetch(&workers_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Moves the workers to random CPUs, again and again, until all are done (they are joined
   after the mover, so that their handles stay valid). */
static void *mover(void *arg) {
  (void)arg;
  uint64_t rng = 7;
  unsigned ncpu = os_cpu_possible();
  while (__atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < WORKERS) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(unit_rand(&rng) % ncpu, &set);
    pthread_setaffinity_np(workers[unit_rand(&rng) % WORKERS], sizeof set, &set); /* may fail */
    sched_yield();
  }
  return NULL;
}

/* Allocates and frees QUIET_SIZE blocks on per-CPU magazines, then exits (leaving them there). */
static void *quiet_user(void *arg) {
  (void)arg;
  static void *objs[400];
  for (int i = 0; i < 400; i++)
    UCHECK((objs[i] = magpie_malloc(QUIET_SIZE)) != NULL);
  UCHECK(mag_tls->cpus != NULL);
  for (int i = 0; i < 400; i++)
    magpie_free(objs[i]);
  return NULL;
}

/* Pins the calling thread to the CPU it runs on. */
static void stay_on_this_cpu(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(sched_getcpu(), &set);
  UCHECK(pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0);
}

/* Stays on its CPU, allocates SPREAD_BLOCKS 16-byte blocks there and checks that no two share
   a cache line. */
#define SPREAD_BLOCKS 8
static void *line_user(void *arg) {
  (void)arg;
  stay_on_this_cpu();
  void *b[SPREAD_BLOCKS];
  for (int i = 0; i < SPREAD_BLOCKS; i++)
    UCHECK((b[i] = magpie_malloc(16)) != NULL);
  UCHECK(mag_tls->cpus != NULL);
  for (int i = 0; i < SPREAD_BLOCKS; i++)
    for (int j = 0; j < i; j++)
      UCHECK((uintptr_t)b[i] / OS_LINE != (uintptr_t)b[j] / OS_LINE);
  for (int i = 0; i < SPREAD_BLOCKS; i++)
    magpie_free(b[i]);
  return NULL;
}

/* Starts its counts of a class just short of wrapping, allocates and frees a few blocks of it,
   and checks that the totals lost nothing. */
#define FOLD_SIZE 5000 /* a class nothing else here uses */
#define FOLD_PAIRS 4
static void *fold_user(void *arg) {
  (void)arg;
  magpie_free(magpie_malloc(FOLD_SIZE));
  tcache_t *tc = mag_tls;
  UCHECK(tc->cpus != NULL);
  unsigned c = sc_of(FOLD_SIZE);
  static mag_totals_t before, after;
  mag_totals(&before);
  uint32_t start = UINT32_MAX - 1 - tc->cpu_counts[c].allocs;
  tc->cpu_counts[c].allocs += start;
  tc->cpu_counts[c].frees += start;
  for (int i = 0; i < FOLD_PAIRS; i++)
    magpie_free(magpie_malloc(FOLD_SIZE));
  mag_totals(&after);
  UCHECK(after.allocs[c] == before.allocs[c] + start + FOLD_PAIRS);
  UCHECK(after.frees[c] == before.frees[c] + start + FOLD_PAIRS);
  UCHECK(tc->cpu_counts[c].allocs <= FOLD_PAIRS &&
         tc->cpu_counts[c].frees <= FOLD_PAIRS); /* folded */
  return NULL;
}

/* Passive false sharing on a CPU's magazines (mag.c theory 6): a thread frees a block that
   another thread allocated, of a class it never allocated itself, on a CPU whose magazines of
   the class hold blocks (a warmer thread freed some there first); its next allocation of the
   class must not hand that block straight back. */
#define SCRATCH_SIZE 7000 /* a class nothing else here uses */
static void *scratch_block;
static int scratch_cpu;

static void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  UCHECK(pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0 && sched_getcpu() == cpu);
}

static void *scratch_warmer(void *arg) {
  (void)arg;
  pin_to(scratch_cpu);
  void *a = magpie_malloc(SCRATCH_SIZE), *b = magpie_malloc(SCRATCH_SIZE);
  UCHECK(a && b && mag_tls->cpus != NULL);
  magpie_free(a);
  magpie_free(b);
  return NULL;
}

static void *scratch_user(void *arg) {
  (void)arg;
  pin_to(scratch_cpu);
  unsigned c = sc_of(SCRATCH_SIZE);
  magpie_free(scratch_block); /* the thread's first call: its tcache starts here */
  UCHECK(mag_tls->cpus != NULL && mag_tls->cpu_counts[c].frees == 1);
  UCHECK(mag_tls->cpu_counts[c + 1].frees == MAG_FREES_UNSEEN);
  void *p = magpie_malloc(SCRATCH_SIZE);
  UCHECK(p != NULL && p != scratch_block && mag_tls->cpu_counts[c].allocs == 1);
  magpie_free(p);
  return NULL;
}

/* Stays on its CPU and, TRADE_ROUNDS times, allocates half a magazine's worth of TRADE_SIZE
   blocks and frees them: from where the warm-up leaves the pair, each round crosses the loaded
   magazine's edge once each way (checked), which a trade between the CPU's two magazines
   absorbs without a miss (mag_percpu.c theory 2). */
#define TRADE_SIZE 6000 /* a class nothing else here uses */
#define TRADE_ROUNDS 500
#define TRADE_MAX 256 /* blocks at most */
#define TRADE_SWING(cap) ((cap) / 2)
static void *trade_user(void *arg) {
  (void)arg;
  stay_on_this_cpu();
  unsigned cpu = (unsigned)sched_getcpu();
  static void *b[TRADE_MAX];
  for (int warm = 0; warm < 4; warm++) { /* magazines grow to their size (slow start) */
    for (unsigned i = 0; i < TRADE_MAX; i++)
      UCHECK((b[i] = magpie_malloc(TRADE_SIZE)) != NULL);
    for (unsigned i = 0; i < TRADE_MAX; i++)
      magpie_free(b[i]);
  }
  UCHECK(mag_tls->cpus != NULL);
  mag_cpu_pair_t *pair = &mag_cpu(cpu)->mags[sc_of(TRADE_SIZE)];
  unsigned cap = mag_top_find(pair->top, NULL)->cap;
  UCHECK(cap >= 8 && pair->prev->cap == cap && cap + cap / 2 <= TRADE_MAX);
  uint64_t misses_before = 0, misses_after = 0;
  static lock_stats_t lock;
  for (int round = -2; round < TRADE_ROUNDS; round++) { /* two rounds to settle the pair */
    if (round == 0) mag_cpu_stats(cpu, &misses_before, &lock);
    mag_t *loaded = mag_top_find(pair->top, NULL);
    unsigned n;
    for (n = 0; n < TRADE_SWING(cap); n++)
      UCHECK((b[n] = magpie_malloc(TRADE_SIZE)) != NULL);
    UCHECK(round < 0 ||
           mag_top_find(pair->top, NULL) != loaded); /* crossed the loaded one's edge */
    while (n > 0)
      magpie_free(b[--n]);
  }
  mag_cpu_stats(cpu, &misses_after, &lock);
  /* without the trade each round missed twice, taking the lock; a stray miss is allowed */
  UCHECK(misses_after - misses_before <= 4);
  return NULL;
}

/* Breaks the magazine layer with breaker in a child process (unit_in_child), then runs the
   checker there: it must abort with a report that contains expect. */
#define BROKEN_CLASS 3
static void (*breaker_now)(mag_cpu_pair_t *pair, cache_t *cp);

static void break_and_check(void *arg) {
  (void)arg;
  breaker_now(&mag_cpu(0)->mags[BROKEN_CLASS], &malloc_caches[BROKEN_CLASS]);
  mag_check();
}

static void check_catches(void (*breaker)(mag_cpu_pair_t *pair, cache_t *cp), const char *expect) {
  static char report[4096];
  breaker_now = breaker;
  int status = unit_in_child(break_and_check, NULL, report, sizeof report);
  UCHECK(WIFSIGNALED(status) && strstr(report, expect) != NULL);
}

/* The state a slow path that moved CPUs used to leave (the sentinel loaded, a magazine beside
   it). */
static void break_half_sentinel(mag_cpu_pair_t *pair, cache_t *cp) {
  (void)cp;
  *pair = (mag_cpu_pair_t){MAG_TOP_NONE, depot_mag_new(4)};
}

/* A magazine both previous on a CPU and on its depot's empty list. */
static void break_two_places(mag_cpu_pair_t *pair, cache_t *cp) {
  mag_t *m = depot_mag_new(4);
  depot_put(cp, m);
  *pair = (mag_cpu_pair_t){mag_top_load(depot_mag_new(4)), m};
}

/* A CPU's loaded magazine whose upper end mark a stray write overwrote. */
static void break_upper_mark(mag_cpu_pair_t *pair, cache_t *cp) {
  (void)cp;
  mag_t *m = depot_mag_new(4);
  *pair = (mag_cpu_pair_t){mag_top_load(m), depot_mag_new(4)};
  m->rounds[m->cap] = NULL;
}

extern const unsigned int __rseq_size __attribute__((weak));

/* Whether the kernel registers an rseq area: tried on a thread of its own, with an area of its
   own, unregistered before it ends (so a skip of the own-area test means the kernel, not
   magpie, refused). */
static void *kernel_rseq_probe(void *arg) {
  static __thread rseq_area_t area = {.cpu_id = -1};
  bool *ok = arg;
  *ok = syscall(SYS_rseq, &area, sizeof area, 0, RSEQ_SIGNATURE) == 0;
  if (*ok)
    (void)syscall(SYS_rseq, &area, sizeof area, 1 /* RSEQ_FLAG_UNREGISTER */, RSEQ_SIGNATURE);
  return NULL;
}

int main(int argc, char **argv) {
  bool own = argc > 1 && strcmp(argv[1], "own") == 0;
  /* per-CPU magazines for every thread but the first; no heap profiling, whose sampled blocks
     are served by the large path, outside the class counts checked below */
  unit_options(argv, own ? "reaper=0,percpu_threads=1,profile_rate=0,percpu=2"
                         : "reaper=0,percpu_threads=1,profile_rate=0");
  if (own) { /* glibc registered none, so the area is magpie's, and it must work */
    UCHECK(&__rseq_size == NULL || __rseq_size == 0);
    UCHECK(os_rseq_available());
    bool kernel = false;
    pthread_t probe;
    UCHECK(pthread_create(&probe, NULL, kernel_rseq_probe, &kernel) == 0);
    UCHECK(pthread_join(probe, NULL) == 0);
    if (!kernel) {
      unit_skip("unit_percpu", "the kernel refuses to register an rseq area");
      return unit_exit();
    }
    os_rseq_register();
    UCHECK(rseq_cpu(os_rseq_offset()) >= 0); /* magpie's area, registered */
  } else if (!os_rseq_available()) {
    unit_skip("unit_percpu", "glibc registered no rseq area (a kernel without rseq, or "
                             "glibc.pthread.rseq=0): magpie runs without per-CPU magazines");
    return unit_exit();
  }
  UCHECK(mag_percpu());
  bool fence = os_fence_rseq_register(); /* what mag_percpu.c found when it started */
  if (!fence)
    unit_skip("unit_percpu", "the checks that trim and the reaper take CPUs' loaded magazines "
                             "(end of part 1, part 2, part 3) and the trade (part 5): the kernel "
                             "refuses membarrier("
                             "MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ)");
  magpie_free(magpie_malloc(1));
  UCHECK(mag_tls->cpus == NULL); /* the first thread: threads do not outnumber CPUs yet */
  /* so no thread has taken the CPUs' records: mapped, but set up and touched by nobody */
  UCHECK(mag_cpu_count() == 0);
  for (unsigned i = 0; i < os_cpu_possible(); i++)
    UCHECK(!os_resident((uintptr_t)mag_cpu(i), sizeof(mag_cpu_t)));

  /* 1. migrating threads: nothing handed out twice, nothing lost */
  pthread_t m;
  for (uintptr_t i = 0; i < WORKERS; i++)
    UCHECK(pthread_create(&workers[i], NULL, worker, (void *)i) == 0);
  UCHECK(pthread_create(&m, NULL, mover, NULL) == 0);
  UCHECK(pthread_join(m, NULL) == 0);
  for (int i = 0; i < WORKERS; i++)
    UCHECK(pthread_join(workers[i], NULL) == 0);
  UCHECK(mag_cpu_count() == os_cpu_possible()); /* set up when the first worker took them */
  for (int i = 0; i < SHARED; i++)
    if (shared[i]) unit_block_free(shared[i]);
  UCHECK(unit_total_slabs() > 0); /* the CPUs' magazines and the depots hold the freed blocks */
  /* every operation was counted, in the counts-only layout of the workers' tcaches */
  static mag_totals_t sum;
  mag_totals(&sum);
  uint64_t allocs = 0, frees = 0;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    allocs += sum.allocs[c];
    frees += sum.frees[c];
  }
  UCHECK(allocs == frees && allocs >= (uint64_t)WORKERS * OPS);
  mag_check();
  magpie_trim();
  mag_check();
  UCHECK(!fence || unit_total_slabs() == 0);

  /* 2. the reaper takes a CPU's magazines, loaded ones included, only once it is quiet */
  cache_t *qc = &malloc_caches[sc_of(QUIET_SIZE)];
  mag_reclaim(false); /* start an interval */
  pthread_t q;
  UCHECK(pthread_create(&q, NULL, quiet_user, NULL) == 0);
  UCHECK(pthread_join(q, NULL) == 0);
  mag_reclaim(false); /* the CPUs that hold these objects missed in this interval */
  depot_reap(qc, true);
  UCHECK(objects_out(qc) > 0);
  /* a CPU whose lock a slow path holds is passed by, not waited for (held here by this thread,
     a reap that waited would never return) */
  for (unsigned i = 0; i < mag_cpu_count(); i++)
    lock_acquire(&mag_cpu(i)->lock);
  mag_reclaim(false);
  for (unsigned i = 0; i < mag_cpu_count(); i++)
    lock_release(&mag_cpu(i)->lock);
  depot_reap(qc, true);
  UCHECK(objects_out(qc) > 0);
  mag_reclaim(false); /* quiet since: both magazines of every CPU go to the depot */
  depot_reap(qc, true);
  UCHECK(!fence || objects_out(qc) == 0);

  /* 3. a CPU's first refill of a small class, after trim emptied every CPU's magazines (the
     loaded ones only where the fence works), deals its blocks out a line at a time */
  magpie_trim();
  if (fence) {
    UCHECK(pthread_create(&q, NULL, line_user, NULL) == 0);
    UCHECK(pthread_join(q, NULL) == 0);
  }

  /* 4. 32-bit counts are folded before they wrap */
  UCHECK(pthread_create(&q, NULL, fold_user, NULL) == 0);
  UCHECK(pthread_join(q, NULL) == 0);

  /* 4b. a block freed by a thread that never allocated its class goes home, not to the CPU's
     magazine that the thread's next allocation pops */
  scratch_cpu = sched_getcpu();
  UCHECK((scratch_block = magpie_malloc(SCRATCH_SIZE)) != NULL);
  UCHECK(pthread_create(&q, NULL, scratch_warmer, NULL) == 0);
  UCHECK(pthread_join(q, NULL) == 0);
  UCHECK(pthread_create(&q, NULL, scratch_user, NULL) == 0);
  UCHECK(pthread_join(q, NULL) == 0);

  /* 5. a CPU's two magazines trade places without its lock (only where the fence works) */
  if (fence) {
    UCHECK(pthread_create(&q, NULL, trade_user, NULL) == 0);
    UCHECK(pthread_join(q, NULL) == 0);
  }

  /* 6. the invariant checker passes here, and catches a broken pair and a magazine held twice */
  mag_check();
  check_catches(break_half_sentinel, "a pair has the sentinel loaded beside a magazine");
  check_catches(break_two_places, "a magazine is in two places");
  check_catches(break_upper_mark, "a loaded magazine's end marks are broken");
  printf("percpu: ok (%d workers moved between CPUs, %d operations each)\n", WORKERS, OPS);
  return unit_exit();
}
