/* stats: counters and reports. See stats.c. */
#ifndef MAGPIE_STATS_H
#define MAGPIE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "report_buf.h"

typedef struct stats_summary {
  uint64_t allocs, frees, bytes_requested, live_bytes, peak_live_bytes;
  uint64_t mapped_bytes, peak_mapped_bytes, large_allocs, large_frees, large_live_bytes;
  uint64_t threads_live, threads_ever;
  uint64_t large_peak_blocks, large_peak_bytes;
} stats_summary_t;
void stats_summary(stats_summary_t *out);
/* Writes the report (MAGPIE_STATS_TEXT or _JSON) to fd. */
void stats_write(int fd, int format);
/* Writes malloc_stats' report to fd, in glibc's format with magpie's figures. */
void stats_write_glibc(int fd);
/* Writes malloc_info's XML, in glibc's element layout with magpie's figures, to b. */
void stats_write_xml(report_buf_t *b);
/* The version of the JSON report's schema (docs/stats.md). */
#define MAGPIE_STATS_SCHEMA 2
/* Publishes a snapshot to the live area if publish_ms (or reap_ms) passed since the last one;
   now is os_now_ns(). Called by the periodic reap. */
void stats_publish(uint64_t now);
/* The exit report asked for by MAGPIE_OPTIONS=stats=... */
void stats_at_exit(void);
void stats_fork_prepare(void); /* the report lock comes first in the fork lock order */
void stats_fork_parent(void);
void stats_fork_child(void);

#endif
