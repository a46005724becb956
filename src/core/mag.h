/* mag: the magazine layer's interface: thread caches (mag.c), per-CPU magazines (mag_percpu.c),
   object-cache slots (mag_slots.c), the reaper's parking (mag_reclaim.c); mag_fast.h holds the
   inline pop and push. */
#ifndef MAGPIE_MAG_H
#define MAGPIE_MAG_H

#include "cache.h"
#include "export.h"
#include "sizeclass.h"

#include <stddef.h>

#define MAG_CACHE_SLOTS 256 /* object caches with a per-thread slot; later ones go to the depot */

/* Per-thread counters use lock.h's STAT_ADD and STAT_READ. */

/* One cache's magazines, a thread's or a CPU's: Bonwick's loaded and previous magazines. */
typedef struct mag_pair {
  mag_t *loaded; /* never NULL; &mag_empty only while prev is too, or while the reaper has
                    parked the cache (mag_reclaim.c) */
  mag_t *prev;
} mag_pair_t;

/* A thread's operations on one cache, 64-bit (written by the owner only). */
typedef struct mag_counts {
  uint64_t allocs; /* objects handed out to the thread */
  uint64_t frees;
} mag_counts_t;

/* A thread's operations on one class while it uses per-CPU magazines: half as wide, so that
   hundreds of threads cost less. Once a count's top bit is set the fast path misses, and the
   slow path moves both into the process's totals, long before either could wrap. */
typedef struct mag_counts_cpu {
  uint32_t allocs;
  uint32_t frees; /* MAG_FREES_UNSEEN until the thread's first free of the class */
} mag_counts_cpu_t;

/* A count no thread reaches (the slow path folds counts at 1 << 31), whose top bit makes the
   thread's first free of the class miss: mag.c theory 6. */
#define MAG_FREES_UNSEEN UINT32_MAX
static inline uint32_t mag_frees_seen(uint32_t frees) {
  return frees == MAG_FREES_UNSEEN ? 0 : frees;
}

/* One object cache of a thread with magazines of its own: the pair and the thread's counts. */
typedef struct thread_mags {
  mag_pair_t mags;
  mag_counts_t count;
} thread_mags_t;

/* A loaded magazine of one of malloc's classes, a thread's own or a CPU's, is a pointer to its
   top: the slot the next push fills, just above its last round. Both ends of a magazine so
   loaded hold its end mark, its address with the low bit set, which no block has: the word
   below its first round (its depot link, unused while loaded) and the word above its last
   possible one (mag.c theory 8). A pop that reads a mark found the magazine empty, a push that
   finds one found it full: neither reads the magazine's header, behind a pointer, whose count n is
   stale while it is loaded. MAG_TOP_NONE, between two marks of no magazine, is the sentinel. */
extern MAGPIE_HIDDEN void *mag_top_none[2];
#define MAG_TOP_NONE (&mag_top_none[1])
static inline bool mag_is_end(const void *round) {
  return (uintptr_t)round & 1;
}

/* malloc's classes of a thread with magazines of its own, an array a field: each entry is a
   word, so that the fast path reaches its class's top and count with the class scaled by 8 in
   the address, no multiply or add before it. */
typedef struct own_classes {
  void **top[SC_COUNT + 1]; /* the loaded magazine's top */
  uint64_t allocs[SC_COUNT + 1];
  uint64_t frees[SC_COUNT + 1];
  mag_t *prev[SC_COUNT + 1];
} own_classes_t;

/* A thread's slot of an object cache (mag_slots.c). */
typedef struct cache_slot {
  thread_mags_t own;
  cache_t *cache; /* the object cache these magazines belong to, or NULL */
} cache_slot_t;

/* A thread's cache. The per-class part comes last and has two layouts, chosen when the thread
   starts: a thread with magazines of its own keeps them beside its counts (own); a thread on
   per-CPU magazines keeps counts only (cpu_counts), and its tcache ends there
   (TCACHE_CPU_SIZE), which halves what each of hundreds of threads costs. */
typedef struct tcache {
  char *cpus;   /* per-CPU magazines (mag_percpu.c) this thread uses for malloc, or NULL: its own */
  uint8_t busy; /* nonzero while the owner works on its own magazines without the lock */
  bool homed;   /* the thread owns slabs, its tid their home (mag.c theory 10) */
  uint32_t tid; /* the kernel's id of the owner */
  lock_t lock;  /* the owner's slow paths, mag_reclaim */
  uint64_t bytes_requested; /* sum of malloc sizes (small and large) */
  uint64_t large_allocs, large_frees;
  union {
    int64_t sample_left;    /* allocations until the next sampled one (sample.c) */
    struct tcache *leaving; /* its thread exited: on the registry's leaving list (mag.c) */
  };
  uint32_t misses;            /* slow paths taken (lock) */
  uint32_t misses_seen;       /* misses at the last mag_reclaim (lock) */
  cache_slot_t *slots;        /* MAG_CACHE_SLOTS object-cache slots, mapped on first use */
  uintptr_t stack;            /* an address in the owner's stack (leak reports' roots) */
  struct tcache *next, *prev; /* the registry of live thread caches (mag_registry_lock) */
  union {                     /* malloc's size classes; [0] is never used */
    struct {                  /* cpus NULL */
      own_classes_t own;
      uint64_t swept_at;                   /* os_now_ns of the last sweep (theory 9, mag.c; lock) */
      uint32_t allocs_swept[SC_COUNT + 1]; /* own.allocs[c] then, low bits (lock) */
    };
    mag_counts_cpu_t cpu_counts[SC_COUNT + 1]; /* cpus set */
  };
} tcache_t;

#define TCACHE_CPU_SIZE (offsetof(tcache_t, own) + sizeof(mag_counts_cpu_t) * (SC_COUNT + 1))

/* One CPU's pair of magazines of a class: the loaded one as its top, as a thread's own (mag.h
   above), and the previous one. */
typedef struct mag_cpu_pair {
  void **top;
  mag_t *prev;
} mag_cpu_pair_t;

/* One CPU's magazines of malloc's classes (mag_percpu.c). Restartable sequences on the CPU pop
   and push on the loaded magazines without a lock, and trade a pair's two while the lock is
   free (rseq.h); everything else happens under the lock: the previous magazines, and replacing
   a loaded one, which only a sequence on that CPU may do, or anyone after taking it away and
   fencing the CPU. */
typedef struct mag_cpu {
  mag_cpu_pair_t mags[SC_COUNT + 1]; /* threads count their own operations in their tcaches */
  lock_t lock;
  uint32_t misses;                          /* slow paths taken on this CPU (lock) */
  uint32_t misses_seen;                     /* misses at the last mag_reclaim (lock) */
} __attribute__((aligned(4096))) mag_cpu_t; /* rseq.h: CPU i's record is at i << 12 */

/* &mags[c].top */
#define MAG_CPU_SLOT(c) (offsetof(mag_cpu_t, mags) + (c) * sizeof(mag_cpu_pair_t))

/* The calling thread's cache: &tcache_boot before its first allocation, &tcache_dead after it
   exited. Both have only empty magazines, so the fast path always misses on them. */
extern __thread MAGPIE_HIDDEN tcache_t *mag_tls __attribute__((tls_model("initial-exec")));
extern tcache_t tcache_boot, tcache_dead;
/* Written once at bring-up, read by every fast-path call (and cpu_fence by the per-CPU trade):
   a line of their own (the type's alignment pads it to one), so that no write to a neighbour (a
   lock, a count at a thread's start or exit) takes the line out of every CPU's cache. */
typedef struct mag_consts {
  uintptr_t secret;    /* the free marker of block p is p ^ secret */
  ptrdiff_t rseq_area; /* glibc's __rseq_offset, once per-CPU is on */
  bool cpu_fence;      /* os_fence_rseq works: CPUs' pairs trade without their locks, and idle CPUs'
                          loaded magazines can be taken (mag_percpu.c) */
} __attribute__((aligned(64))) mag_consts_t;
extern MAGPIE_HIDDEN mag_consts_t mag_consts;
/* Set before the first block is served (memcheck mode): every thread stays on tcache_dead, so
   each operation misses and goes straight to the slab layer, where the front sees it. */
extern bool mag_magazines_off;

void mag_init(void);
/* Called at the start of every miss that goes past the thread's or CPU's magazines, outside
   any lock, alloc telling an allocation's miss from a free's; the front layer sets it (the
   periodic reap) at bring-up. */
extern void (*mag_miss_hook)(bool alloc);
/* Bytes handed to the program or held in magazines: +/- delta at each magazine movement and
   large block; its high-water mark bounds the peak of live bytes from above. */
void mag_held_add(ptrdiff_t delta);
size_t mag_held_peak(void);
void mag_raise_peak(size_t *peak, size_t now); /* *peak = max(*peak, now), atomically */
/* A fresh sampling countdown: about opt.sample allocations, jittered so threads do not sample
   in step (debug/sample.c draws the samples). */
int64_t mag_sample_countdown(void);
/* The first step of malloc's slow path, before sampling and the heap profiler's clock: where
   the loaded magazine of the thread (its CPU) ran out and the previous one has rounds, they
   trade places without a lock and the block comes from there; NULL otherwise. */
void *mag_malloc_traded(size_t size);
void *mag_malloc(unsigned c, size_t size); /* the slow path of class c */
void mag_free(unsigned c, void *p);        /* the slow path, with the checks */
void mag_thread_exit(void *tc);
/* Takes the magazines of CPUs and threads that have not missed since the last call (the
   reaper's interval), or of all of them (all: malloc_trim, and an allocation that found no
   memory), and gives them to the depots. A thread inside a fast-path operation keeps its own. */
void mag_reclaim(bool all);
/* Flushes the calling thread's magazines to the depots (malloc_trim). */
void mag_flush_self(void);
void mag_large_count(size_t size, int sign); /* statistics of large blocks */
/* How many allocations of class c a miss of the calling thread stands for (sampling). */
unsigned mag_miss_weight(unsigned c);
bool mag_percpu(void); /* malloc's magazines are per CPU */

/* object caches */
void *mag_cache_alloc(cache_t *cp);
void mag_cache_free(cache_t *cp, void *obj);
void mag_cache_drain(cache_t *cp); /* takes every thread's magazines of cp (cache destroy) */
/* The objects of object cache cp handed out and given back, over every thread, live or exited. */
void mag_cache_counts(cache_t *cp, uint64_t *allocs, uint64_t *frees);

/* statistics: sums over live threads and the exited ones */
typedef struct {
  uint64_t allocs[SC_COUNT + 1], frees[SC_COUNT + 1];
  uint64_t bytes_requested, large_allocs, large_frees;
  uint64_t large_bytes_requested; /* the part of bytes_requested in large blocks */
  uint64_t threads_live, threads_ever;
} mag_totals_t;
/* Statistics of the per-CPU magazines: how many CPUs have them (0: magazines are per thread,
   or no thread has taken the CPUs' yet), and CPU cpu's misses and its lock's counters (added
   to *lock). */
unsigned mag_cpu_count(void);
void mag_cpu_stats(unsigned cpu, uint64_t *misses, lock_stats_t *lock);
/* The registry lock's counters, added to *lock. */
void mag_registry_lock_stats(lock_stats_t *lock);
void mag_totals(mag_totals_t *out);
/* One live thread's malloc figures (statistics). */
typedef struct mag_thread_row {
  uint64_t tid, allocs, frees, misses, bytes_requested;
} mag_thread_row_t;
/* The rows of the max busiest live threads (by allocations and frees), in no order; returns
   how many it wrote. */
size_t mag_thread_rows(mag_thread_row_t *rows, size_t max);
/* An address in the stack of each live thread with a cache but the caller, and its kernel
   thread id, at most max of them; returns how many. */
size_t mag_thread_stacks(uintptr_t *stacks, uint32_t *tids, size_t max);
/* Gives the calling thread its cache now, if it has none yet: debug mode, whose blocks bypass
   the magazines, so enters its threads in the registry that mag_thread_stacks reads. */
void mag_thread_register(void);

/* Aborts with a report if an invariant of the magazine layer is broken (mag_check.c). */
void mag_check(void);

void mag_fork_prepare(void);
void mag_fork_parent(void);
bool mag_fork_child(void); /* true: other threads had caches */

#endif
