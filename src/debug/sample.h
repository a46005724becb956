/* sample: sampled guard allocations in production mode (MAGPIE_OPTIONS=sample=N). See sample.c. */
#ifndef MAGPIE_SAMPLE_H
#define MAGPIE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define SAMPLE_SIZE_MAX ((size_t)4096) /* larger requests are never sampled: one page a slot */

/* Called from malloc's slow path for a request of size bytes that stands for about `weight`
   allocations of the calling thread: a guarded block when this one is sampled, else NULL. */
void *sample_maybe(size_t size, unsigned weight);
/* free, usable size of a block whose page-map entry carries PM_TAG_SAMPLE. */
void sample_free(void *p, uintptr_t entry);
size_t sample_size(void *p, uintptr_t entry);
/* Sampled blocks (they bypass the per-thread counters), for statistics. */
void sample_totals(uint64_t *allocs, uint64_t *frees, uint64_t *live_bytes);
/* fork.c's handlers: sample_lock is held across fork, in fork.c's lock order, and reset in the
   child, so a thread inside sample_maybe or sample_free at the fork cannot leave it held there. */
void sample_fork_prepare(void);
void sample_fork_parent(void);
void sample_fork_child(void);

#endif
