/* prof: the heap profiler (MAGPIE_OPTIONS=profile_rate=...): sampled blocks, their stacks, the
   profile files. See prof.c (the samples) and prof_write.c (the files). */
#ifndef MAGPIE_PROF_H
#define MAGPIE_PROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mag.h"

#define PROF_DEPTH 32 /* frames kept of each sampled allocation */

/* One distinct allocation stack and what its samples stand for. The frames never change once
   the stack is listed; the figures change under prof_lock. */
typedef struct prof_stack {
  struct prof_stack *chain; /* the next stack in its hash bucket */
  struct prof_stack *next;  /* every stack, newest first */
  uint64_t hash;
  int depth;
  uintptr_t frames[PROF_DEPTH]; /* return addresses, the allocating call's first */
  double alloc_objects, alloc_bytes, live_objects, live_bytes;
} prof_stack_t;

/* A stack's figures at one moment (prof_snapshot). */
typedef struct prof_row {
  const prof_stack_t *stack;
  double alloc_objects, alloc_bytes, live_objects, live_bytes;
} prof_row_t;

/* A block of size bytes (aligned to align, zeroed if zero) of class c (0: large) sampled by
   the clock (core/prof_clock.h), standing for points * profile_rate bytes of such allocations:
   served from the large path, its page-map entry pointing at its record, so that its free
   comes to the slow path. NULL when no memory was found (errno ENOMEM). */
void *prof_alloc(size_t size, size_t align, bool zero, unsigned c, uint64_t points);
/* The same for large block p just served (realloc's resize in place); returns p. */
void *prof_adopt(void *p, size_t size, uint64_t points);
/* A block whose entry carries PM_TAG_PROFILED: its free, its usable size, and its record ended
   with the block kept (realloc), which returns the plain large entry put back in its place.
   A pointer that is not the block's start is reported. */
void prof_free(void *p, uintptr_t entry);
size_t prof_size(void *p, uintptr_t entry);
uintptr_t prof_release(void *p, uintptr_t entry);
/* realloc in place: the plain large entry of sampled block p, for the resize, and once the
   resize is done (the page map already the new block's), the end of p's record. */
uintptr_t prof_large_entry(void *p, uintptr_t entry);
void prof_forget(void *p, uintptr_t entry);
/* Statistics: moves the sampled blocks of small requests, which the large path served, from
   t's large counts to their classes'; *pages: the bytes the live ones hold in large blocks. */
void prof_class_totals(mag_totals_t *t, uint64_t *pages);
/* Maps the figures the profiler's lock's holder writes and names the lock to the test build
   (platform/inject.h: quiet locks). */
void prof_init(void);
/* Adds the profiler's lock's counters to *lock (statistics: its samples take it). */
void prof_lock_stats(lock_stats_t *lock);
/* Per class: the objects and the requested bytes that the samples of its small requests stand
   for, since the start (theory 1): their mean request size, against the class's size, is the
   estimate of its rounding loss. */
void prof_class_requests(double objects[SC_COUNT + 1], double bytes[SC_COUNT + 1]);
/* Copies up to max stacks' figures into rows; returns how many stacks there are. */
size_t prof_snapshot(prof_row_t *rows, size_t max);

/* One writer at a time (the exit's and a request's): false when another writes and not wait. */
bool prof_write_begin(bool wait);
void prof_write_end(void);

/* prof_write.c: writes the profile: path (gzipped pprof protobuf, both profiles),
   path.inuse.folded and path.alloc.folded (folded stacks, bytes); false if one failed. */
bool prof_write(const char *path);
/* The exit profile (profile_file), and the on-demand request of `magpie profile PID FILE`:
   polled at most once per reap (front/caches.c). */
void prof_at_exit(void);
void prof_poll_request(void);

/* fork.c's handlers: prof_lock is held across fork in fork.c's lock order, reset in the child. */
void prof_fork_prepare(void);
void prof_fork_parent(void);
void prof_fork_child(void);

#endif
