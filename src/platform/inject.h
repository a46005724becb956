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
/* A lock was taken (is being let go): lock.h's, for the quiet ones' page faults. */
void inject_lock_taken(const void *lock);
void inject_lock_released(const void *lock);
/* The calling thread forgets the quiet locks it holds: fork's, whose copy-on-write faults after
   the call are the fork's, not a holder's. */
void inject_lock_forget(void);
#define INJECT_START(seed) inject_start(seed)
#define INJECT(point) inject_at(point)
#define INJECT_QUIET(name, first, count, stride) inject_quiet(name, first, count, stride)
#define INJECT_LOCK_TAKEN(lock) inject_lock_taken(lock)
#define INJECT_LOCK_RELEASED(lock) inject_lock_released(lock)
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
