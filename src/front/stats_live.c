/*
 * stats_live: the live area, the snapshot published for other processes (tools/magpie).
 *
 * Theory
 *   1. The area is a memfd mapped shared, made at the first publish (close-on-exec; a fork's
 *      child drops its parent's and makes its own). The reap publishes at most once per
 *      publish_ms (reap_ms by default) under a sequence lock (seq odd while writing), so a
 *      reader in another process (tools/magpie live.c) copies it without stopping this one
 *      (docs/decisions/obs-stats-area.md).
 *   2. The first publish comes STATS_FIRST_NS after the first call (the process's first slow
 *      path's reap tick, or the reaper thread's start), not a whole interval later, so that a
 *      young process has an area within a fraction of a second (the tool waits that long);
 *      a process that ends sooner, a short command, pays nothing for it (a memfd and a
 *      snapshot: docs/decisions/obs-stats-area.md). A fork's child keeps its parent's clock and
 *      publishes at the next due time.
 */
#include "options.h"
#include "stats.h"
#include "stats_impl.h"

#include <string.h>

static char *stats_area; /* the live area, or NULL before the first publish */
static int stats_area_fd = -1;
static bool stats_area_refused;  /* the kernel (or a sandbox) refused the memfd: not asked again */
static uint64_t stats_published; /* snapshots published (stats_lock) */
static uint64_t stats_publish_due; /* os_now_ns of the next publish (atomic) */

#define STATS_FIRST_NS 100000000u /* 100 ms: from the first call to the first publish */

/* Copies the snapshot into the area under its sequence lock (stats_lock held: one writer). */
static void stats_area_write(void) {
  if (!stats_area) {
    stats_area = os_map_shared(MAGPIE_AREA_NAME, STATS_AREA_SIZE, &stats_area_fd);
    if (!stats_area) {
      stats_area_refused = true;
      return;
    }
  }
  magpie_area_t *area = (magpie_area_t *)stats_area;
  /* The odd count before any field: a sequentially consistent exchange is a full barrier on
     the machines magpie supports (and ThreadSanitizer accepts it, unlike a lone fence). */
  uint64_t seq = __atomic_exchange_n(&area->seq, __atomic_load_n(&area->seq, __ATOMIC_RELAXED) + 1,
                                     __ATOMIC_SEQ_CST);
  SNAP->seq = seq + 1;
  SNAP->published = ++stats_published;
  SNAP->publish_ns = os_realtime_ns();
  /* The header and the rows in use: rows past the counts are never read. */
  const magpie_area_t *a = SNAP;
  memcpy(stats_area, a, sizeof *a);
  memcpy(stats_area + a->class_offset, SNAP_CLASS(0), a->class_count * sizeof(magpie_area_class_t));
  memcpy(stats_area + a->lock_offset, SNAP_LOCK(0), a->lock_count * sizeof(magpie_area_lock_t));
  memcpy(stats_area + a->cpu_offset, SNAP_CPU(0), a->cpu_count * sizeof(magpie_area_cpu_t));
  memcpy(stats_area + a->thread_offset, SNAP_THREAD(0),
         a->thread_count * sizeof(magpie_area_thread_t));
  __atomic_store_n(&area->seq, seq + 2, __ATOMIC_RELEASE); /* every field before the even count */
}

void stats_publish(uint64_t now) {
  size_t ms = opt.publish_ms ? opt.publish_ms : opt.reap_ms;
  uint64_t due = __atomic_load_n(&stats_publish_due, __ATOMIC_RELAXED);
  if (due == 0) { /* the first call (bring-up's first miss, the reaper's start) sets the clock */
    __atomic_compare_exchange_n(&stats_publish_due, &due, now + STATS_FIRST_NS, false,
                                __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return;
  }
  if (now < due ||
      !__atomic_compare_exchange_n(&stats_publish_due, &due, now + (uint64_t)ms * 1000000u, false,
                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return;
  lock_acquire(&stats_lock);
  if (!stats_area_refused) {
    stats_snapshot(false);
    stats_area_write();
  }
  lock_release(&stats_lock);
}

/* The parent's area is shared with the child: the child lets go of it and makes its own. */
void stats_area_drop(void) {
  if (stats_area) {
    os_unmap_file(stats_area, STATS_AREA_SIZE); /* like a file's: not counted as heap */
    os_close(stats_area_fd);
    stats_area = NULL;
    stats_area_fd = -1;
  }
  stats_published = 0;
}
