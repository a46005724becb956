/* memcheck_mode: magpie's blocks told to valgrind's memcheck. See memcheck_mode.c. */
#ifndef MAGPIE_MEMCHECK_MODE_H
#define MAGPIE_MEMCHECK_MODE_H

#include <stdbool.h>
#include <stddef.h>

extern bool memcheck_on; /* set once by memcheck_init, before the first block */

/* At bring-up, after debug mode's flags are known: on when memcheck runs the program. */
void memcheck_init(void);
/* From the library's destructor: memcheck's checks of magpie's metadata on again. */
void memcheck_at_exit(void);
/* Fresh memory of the heap arena: inaccessible until handed out. */
void memcheck_heap_mapped(void *p, size_t size);
/* Around a slow path's own work on blocks: the thread's error reports off, then on (nested). */
void memcheck_quiet(void);
void memcheck_loud(void);
/* p handed out with size bytes, zeroed (or constructed) or not. */
void memcheck_served(void *p, size_t size, bool zeroed);
/* p given back by the program: memcheck reports it unless it is a live block; inaccessible
   from now on. */
void memcheck_freed(void *p);
/* The size the program asked for of live block p, usable bytes long. */
size_t memcheck_requested(void *p, size_t usable);
/* Live block p of requested bytes keeps its place at new_size bytes (realloc); false when
   memcheck cannot be told so exactly: the block must move. */
bool memcheck_resized(void *p, size_t requested, size_t new_size);

#endif
