/* caches: what is done to every cache at once (bring-up, reaping, trimming, reclaiming, fork)
   and the public object-cache API. See caches.c. */
#ifndef MAGPIE_CACHES_H
#define MAGPIE_CACHES_H

#include "cache.h"

void cache_init(void);
/* Runs the periodic reap when reap_ms has passed since the last one (any thread's slow path;
   alloc: an allocation's, the only kind that starts the reaper thread: theory 3). */
void cache_reap_tick(bool alloc);
/* Returns everything free to the OS (malloc_trim); returns the bytes given back. */
size_t cache_trim(void);
/* After an allocation of size bytes found no memory: this thread's magazines, the depots'
   surplus and every wholly free span go back; true when something did, worth one more try. */
bool cache_reclaim(size_t size);
/* Calls fn on each object cache, under the list's lock (statistics). */
void cache_each_object_cache(void (*fn)(cache_t *cp, void *arg), void *arg);
void cache_fork_prepare(void);
void cache_fork_parent(void);
void cache_fork_child(void);

#endif
