/* prof_clock: when the heap profiler takes a sample (a Poisson process over the bytes each
   thread allocates). See prof_clock.c. */
#ifndef MAGPIE_PROF_CLOCK_H
#define MAGPIE_PROF_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Called from an allocation's slow path, before the block is served: c is its size class (0:
   a large block of size bytes). Returns how many of the calling thread's sampling points the
   bytes it allocated since its last call for c passed, this allocation's included: 0, or the
   allocation is sampled and stands for points * profile_rate bytes of blocks of its unit
   (prof_clock_unit). A sampled block of a class must not then be served from the class (it is
   not counted there). */
uint64_t prof_clock_tick(unsigned c, size_t size);
/* The bytes one allocation of class c (0: of size bytes, large) counts on the clock. */
size_t prof_clock_unit(unsigned c, size_t size);
/* The calling thread exits (mag_thread_exit): its clock goes back to the pool. */
void prof_clock_thread_exit(void);

#endif
