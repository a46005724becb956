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
 */
#ifndef MAGPIE_INJECT_H
#define MAGPIE_INJECT_H

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
   that a test can tell the points were reached. */
void inject_start(uint64_t seed);
void inject_at(inject_point_t point);
#define INJECT_START(seed) inject_start(seed)
#define INJECT(point) inject_at(point)
#else
#define INJECT_START(seed) ((void)(seed))
#define INJECT(point) ((void)0)
#endif

#endif
