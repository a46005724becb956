/*
 * inject: forced migrations and delays at named points of magpie's concurrency protocols, so
 * that interleavings a many-core machine produces by chance happen here on purpose, and again
 * with the same seed. Only in the test build libmagpie_inject.so (MAGPIE_INJECT defined), with
 * MAGPIE_OPTIONS=inject=SEED; in every other build INJECT(point) is nothing.
 *
 * At a point, a thread draws from its own generator (the seed and its kernel thread id): it may
 * move to another CPU it is allowed on (sched_setaffinity to that CPU alone, then back to its
 * old mask: the thread resumes on the new CPU), give up the CPU (sched_yield), or spin a few
 * microseconds. Points may hold locks: the actions take none and never allocate.
 *
 * Quiet locks: the locks a crowd of threads waits on while their holder only updates a few
 * words (the thread registry, the CPUs' locks, malloc's depots and slab locks, the arenas',
 * the heap profiler's) must never be held across a page fault, whose return to the program is a
 * preemption point as a system call's is. Their owners name them (INJECT_QUIET), and the
 * test build counts the page faults each thread takes while it holds one; the count is
 * reported at exit.
 */
#ifndef MAGPIE_INJECT_H
#define MAGPIE_INJECT_H

#include <stddef.h>
#include <stdint.h>
#ifdef MAGPIE_INJECT
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#endif

typedef enum inject_point {
  INJECT_CPU_LOCKED,    /* a per-CPU slow path took the lock of the CPU it ran on */
  INJECT_CPU_INSTALL,   /* a per-CPU slow path is about to install its new pair */
  INJECT_CPU_PARKED,    /* the reaper stored the sentinel into CPUs' slots, before the fence */
  INJECT_THREAD_PARKED, /* the reaper parked threads' loaded magazines, before the fence */
  INJECT_DEPOT,         /* inside a depot's exchange, its lock held */
  INJECT_CPU_TRADE,     /* a per-CPU fast path is about to trade its CPU's pair */
  INJECT_GIVE_BACK,     /* an arena or a slab layer let go of its lock to give pages back */
  INJECT_UNLOCKED,      /* a slow step let go of its lock: a slab or a metadata chunk to make,
                           or a slab's hollow chunks to take back */
  INJECT_POINTS
} inject_point_t;

#ifdef MAGPIE_INJECT
/* Turns the points on (seed 0: off). At exit a line on stderr says how often each acted, so
   that a test can tell the points were reached, and another how many page faults were taken
   under quiet locks (and under which lock the first was: its set's name and its index). */
void inject_start(uint64_t seed);
void inject_at(inject_point_t point);
/* The count locks at first, first + stride, ... are quiet (at most 8 such sets, named at
   bring-up; name: a static string, for the report). */
void inject_quiet(const char *name, const void *first, size_t count, size_t stride);
/* Quiet locks' page faults, through INJECT_LOCK_TAKEN and INJECT_LOCK_RELEASED (lock.h's). A
   lock was taken: where the holder stores its count, or NULL where the lock is not watched
   (not quiet, or INJECT_HELD watched already). A lock is being let go, with the holder's
   count now. */
uint64_t *inject_lock_watch(const void *lock);
void inject_lock_released(const void *lock, uint64_t faults);
extern __thread unsigned inject_watched;    /* quiet locks the thread watches */
extern __thread uint64_t inject_own_faults; /* page faults taken in the test build's calls */
extern __thread struct rusage inject_usage; /* inject_faults_now's */
/* The calling thread's page faults, read inline into a buffer of the thread's: no frame of its
   own, so no fault of its own. */
static inline uint64_t inject_faults_now(void) {
  long rc = SYS_getrusage;
  __asm__ volatile("syscall"
                   : "+a"(rc)
                   : "D"(1 /* RUSAGE_THREAD */), "S"(&inject_usage)
                   : "rcx", "r11", "memory");
  return rc ? 0 : (uint64_t)inject_usage.ru_minflt + (uint64_t)inject_usage.ru_majflt;
}
/* A holder's count: its faults less those taken in the test build's own calls, whose frames
   reach below the holder's where the library's would not (lock.h's calls are inline). */
static inline uint64_t inject_holder_faults(void) {
  return inject_faults_now() - inject_own_faults;
}
/* Runs call, the test build's own, counting the faults it takes as its own while the thread
   watches a lock. */
#define INJECT_OWN(call)                                                                           \
  do {                                                                                             \
    bool watching_ = inject_watched != 0;                                                          \
    uint64_t before_ = watching_ ? inject_faults_now() : 0;                                        \
    call;                                                                                          \
    if (watching_) inject_own_faults += inject_faults_now() - before_;                             \
  } while (0)
/* The calling thread forgets the quiet locks it holds: fork's, whose copy-on-write faults after
   the call are the fork's, not a holder's. */
void inject_lock_forget(void);
#define INJECT_START(seed) inject_start(seed)
#define INJECT(point) INJECT_OWN(inject_at(point))
#define INJECT_QUIET(name, first, count, stride) inject_quiet(name, first, count, stride)
#define INJECT_LOCK_TAKEN(lock)                                                                    \
  do {                                                                                             \
    uint64_t *count_at_;                                                                           \
    INJECT_OWN(count_at_ = inject_lock_watch(lock));                                               \
    if (count_at_)                                                                                 \
      *count_at_ = inject_holder_faults(); /* after the call: in the holder's frame */             \
  } while (0)
#define INJECT_LOCK_RELEASED(lock)                                                                 \
  do {                                                                                             \
    if (inject_watched) INJECT_OWN(inject_lock_released(lock, inject_holder_faults()));            \
  } while (0)
#define INJECT_LOCK_FORGET() inject_lock_forget()
#else
#define INJECT_START(seed) ((void)(seed))
#define INJECT(point) ((void)0)
#define INJECT_QUIET(name, first, count, stride)                                                   \
  ((void)(name), (void)(first), (void)(count), (void)(stride))
#define INJECT_LOCK_TAKEN(lock) ((void)0)
#define INJECT_LOCK_RELEASED(lock) ((void)0)
#define INJECT_LOCK_FORGET() ((void)0)
#endif

#endif
