/* inspect: a live snapshot (live.h) as `magpie stats` prints it and as `magpie run --record`
 * records it. */
#ifndef MAGPIE_TOOL_INSPECT_H
#define MAGPIE_TOOL_INSPECT_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "live.h"

void inspect_text(FILE *out, const live_snapshot_t *s);
void inspect_json(FILE *out, const live_snapshot_t *s); /* one object, one line */
/* One line of a --record file: {"t": t, totals..., "classes": [...]} */
void inspect_record_line(FILE *out, double t, const live_snapshot_t *s);

/* --record: appends a line to out for each new snapshot of the program's area, read at each
   tick of run's watch (run.h); start is when the program started (CLOCK_MONOTONIC). */
typedef struct {
  FILE *out;
  struct timespec start;
  live_t *area;            /* NULL until the program has published */
  uint64_t last_published; /* the snapshot last recorded */
  size_t lines;
} inspect_recorder_t;
void inspect_record_tick(void *recorder, pid_t pid);

#endif
