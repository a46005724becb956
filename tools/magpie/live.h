/* live: reading the statistics area a running process publishes (include/magpie_stats.h,
 * docs/stats.md) without stopping it: live_open finds the area through /proc/PID/fd,
 * live_read copies a consistent snapshot, live_close lets go. `magpie stats`, `--record` and
 * `magpie top` use it. */
#ifndef MAGPIE_TOOL_LIVE_H
#define MAGPIE_TOOL_LIVE_H

#include <stddef.h>
#include <sys/types.h>

#include "magpie_stats.h"

typedef struct live live_t; /* an open area */

/* One copied snapshot: the header and the rows, each widened to this tool's row layout
   (fields the writer did not have read as 0). */
typedef struct {
  magpie_area_t head;
  magpie_area_class_t *classes;  /* head.class_count rows */
  magpie_area_lock_t *locks;     /* head.lock_count rows */
  magpie_area_cpu_t *cpus;       /* head.cpu_count rows */
  magpie_area_thread_t *threads; /* head.thread_count rows (none before layout 1.2) */
} live_snapshot_t;

enum {
  LIVE_OK = 0,
  LIVE_NO_PROCESS,  /* no such process, or /proc/PID/fd cannot be read (permission) */
  LIVE_NO_AREA,     /* no magpie, or it has not published yet */
  LIVE_BAD_VERSION, /* a layout major this tool does not know */
  LIVE_BAD_AREA,    /* not a magpie area, or inconsistent */
  LIVE_BUSY,        /* no consistent copy after many tries */
};

/* Opens pid's area; returns LIVE_OK and *out, or a LIVE_* error with why[] explaining. */
int live_open(pid_t pid, live_t **out, char *why, size_t cap);
/* Copies a consistent snapshot into *snap (rows malloc'd: free with live_snapshot_free). */
int live_read(live_t *l, live_snapshot_t *snap, char *why, size_t cap);
void live_snapshot_free(live_snapshot_t *snap);
void live_close(live_t *l);

#endif
