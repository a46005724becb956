/*
 * stats_impl: what the statistics files share with one another. Private to src/front/stats*.c;
 * the rest of the front sees only stats.h.
 *
 *   stats.c        the snapshot (under stats_lock), the summary, the reports' entry points, fork
 *   stats_text.c   the text report
 *   stats_json.c   the JSON report
 *   stats_live.c   the live area: the snapshot published to other processes
 *   stats_glibc.c  glibc's formats: malloc_stats and malloc_info (mallinfo is api.c's)
 */
#ifndef MAGPIE_STATS_IMPL_H
#define MAGPIE_STATS_IMPL_H

#include "hugepage.h"
#include "lock.h"
#include "magpie_stats.h"
#include "os.h"
#include "report_buf.h"
#include "sizeclass.h"

#include <stdbool.h>
#include <stdint.h>

/* The snapshot's layout, the live area's (docs/stats.md): a header, then rows. */
#define STATS_OBJECT_CACHES 64 /* object caches with a row; later ones are left out */
#define STATS_CLASS_ROWS (SC_COUNT + STATS_OBJECT_CACHES)
#define STATS_CPU_ROWS 512
#define STATS_LOCK_ROWS (2 * STATS_CLASS_ROWS + 4 + STATS_CPU_ROWS)
#define STATS_CLASS_OFFSET ((sizeof(magpie_area_t) + 63) & ~(size_t)63)
#define STATS_LOCK_OFFSET (STATS_CLASS_OFFSET + STATS_CLASS_ROWS * sizeof(magpie_area_class_t))
#define STATS_CPU_OFFSET (STATS_LOCK_OFFSET + STATS_LOCK_ROWS * sizeof(magpie_area_lock_t))
#define STATS_THREAD_ROWS 64 /* the busiest live threads */
#define STATS_THREAD_OFFSET (STATS_CPU_OFFSET + STATS_CPU_ROWS * sizeof(magpie_area_cpu_t))
#define STATS_AREA_SIZE                                                                            \
  ((STATS_THREAD_OFFSET + STATS_THREAD_ROWS * sizeof(magpie_area_thread_t) + OS_PAGE - 1) &        \
   ~(OS_PAGE - 1))

extern uint64_t stats_snap_words[STATS_AREA_SIZE / 8]; /* the snapshot (stats_lock) */
extern lock_t stats_lock;           /* protects the snapshot and the area's writes */
extern hugepage_stats_t stats_huge; /* the snapshot's huge-page figures (stats_lock) */

#define SNAP ((magpie_area_t *)stats_snap_words)
#define SNAP_CLASS(i) ((magpie_area_class_t *)((char *)stats_snap_words + STATS_CLASS_OFFSET) + (i))
#define SNAP_LOCK(i) ((magpie_area_lock_t *)((char *)stats_snap_words + STATS_LOCK_OFFSET) + (i))
#define SNAP_CPU(i) ((magpie_area_cpu_t *)((char *)stats_snap_words + STATS_CPU_OFFSET) + (i))
#define SNAP_THREAD(i)                                                                             \
  ((magpie_area_thread_t *)((char *)stats_snap_words + STATS_THREAD_OFFSET) + (i))
/* stats.c: takes the snapshot (stats_lock held); report: the huge-page figures read now. */
void stats_snapshot(bool report);
/* stats_text.c, stats_json.c: the snapshot as a report, into b (stats_lock held). */
void stats_write_text(report_buf_t *b);
void stats_write_json(report_buf_t *b);
/* stats_live.c: a fork's child lets go of its parent's live area. */
void stats_area_drop(void);

#endif
