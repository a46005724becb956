/*
 * stats_text: the snapshot as the text report (MAGPIE_OPTIONS=stats=1, magpie_stats_write,
 * `magpie run --stats`).
 *
 * Theory
 *   1. The process's figures a line each, then the busiest rows of two tables (size classes by
 *      allocations, locks by time waited), STATS_TOP_ROWS each; a table with no rows is left
 *      out. Built with diag's text builder from the snapshot (stats_lock held).
 */
#include "report.h"
#include "stats.h"
#include "stats_impl.h"

#define STATS_TOP_ROWS 5 /* rows of the text report's tables */

/* "  label<padding>value", then " (exact)" for a byte count of 1 KiB or more. */
static void text_line(report_buf_t *b, const char *label, uint64_t v, bool bytes) {
  report_str(b, "  ");
  report_str_width(b, label, 20);
  if (bytes) {
    report_bytes_width(b, v, 13);
    if (v >= 1024) {
      report_str(b, "  (");
      report_count_width(b, v, 0);
      report_str(b, ")");
    }
  } else {
    report_count_width(b, v, 13);
  }
  report_str(b, "\n");
}

/* A table's cell: v in width characters, with thousands separators (commas) or without, and a
   space before it when it fills its column or more, so that no figure (up to 2^64: 26
   characters with separators) runs into the column before. */
static void text_cell(report_buf_t *b, uint64_t v, int width, bool commas) {
  char digits[REPORT_DEC_MAX];
  int n = report_format_dec(digits, v);
  if (n + (commas ? (n - 1) / 3 : 0) >= width) report_str(b, " ");
  if (commas)
    report_count_width(b, v, width);
  else
    report_dec_width(b, v, width);
}

/* The indices of the n rows with the largest key, largest first (insertion into top). */
static unsigned text_top(uint32_t count, uint64_t (*key)(uint32_t i), uint32_t top[STATS_TOP_ROWS],
                         unsigned *used) {
  unsigned n = 0;
  *used = 0;
  for (uint32_t i = 0; i < count; i++) {
    uint64_t k = key(i);
    if (!k) continue;
    (*used)++;
    unsigned at = n < STATS_TOP_ROWS ? n++ : STATS_TOP_ROWS;
    while (at > 0 && key(top[at - 1]) < k) {
      if (at < STATS_TOP_ROWS) top[at] = top[at - 1];
      at--;
    }
    if (at < STATS_TOP_ROWS) top[at] = i;
  }
  return n;
}

static uint64_t class_allocs(uint32_t i) {
  return SNAP_CLASS(i)->kind == 0 ? SNAP_CLASS(i)->allocs : 0;
}

static uint64_t lock_waited(uint32_t i) {
  uint64_t waited = SNAP_LOCK(i)->wait_ns; /* + 1: a contended lock that waited 0 ns still counts */
  return SNAP_LOCK(i)->contended ? waited + (waited < UINT64_MAX) : 0;
}

static void text_table_head(report_buf_t *b, const char *what, unsigned n, unsigned used,
                            const char *by, const char *columns) {
  report_str(b, "  ");
  report_str(b, what);
  report_str(b, " (");
  report_dec(b, n);
  report_str(b, " of ");
  report_dec(b, used);
  report_str(b, by);
  report_str(b, columns);
}

void stats_write_text(report_buf_t *b) {
  const magpie_area_t *a = SNAP;
  report_str(b, "== magpie (pid ");
  report_dec(b, a->pid);
  report_str(b, ")\n");
  text_line(b, "allocations", a->allocs, false);
  text_line(b, "frees", a->frees, false);
  text_line(b, "bytes requested", a->bytes_requested, true);
  text_line(b, "live bytes", a->live_bytes, true);
  text_line(b, "peak live bytes", a->peak_live_bytes, true);
  text_line(b, "cached bytes", a->cached_bytes, true);
  text_line(b, "lost to rounding", a->rounding_bytes, true);
  text_line(b, "mapped bytes", a->mapped_bytes, true);
  text_line(b, "peak mapped bytes", a->peak_mapped_bytes, true);
  text_line(b, "RSS", a->rss_bytes, true);
  text_line(b, "threads", a->threads_total, false);
  text_line(b, "CPUs", a->cpus, false);
  if (os_memory_limit()) text_line(b, "memory limit", os_memory_limit(), true);
  const hugepage_stats_t *h = &stats_huge;
  report_str(b, "  ");
  report_str_width(b, "on huge pages", 20);
  report_bytes_width(b, h->huge_bytes, 13);
  report_str(b, "  (hugepages=");
  report_str(b, h->mode);
  report_str(b, ", kernel THP ");
  report_str(b, h->thp);
  report_str(b, "; ");
  report_bytes_width(b, h->slab_bytes, 0);
  report_str(b, " in slab huge pages (");
  report_bytes_width(b, h->slab_stashed_bytes, 0);
  report_str(b, " of free spans at hand), ");
  report_count_width(b, h->collapses, 0);
  report_str(b, " collapses, ");
  report_count_width(b, h->subreleases, 0);
  report_str(b, " subreleases; ");
  report_bytes_width(b, h->slab_hollow_bytes, 0);
  report_str(b, " given back inside slabs)\n");
  uint32_t top[STATS_TOP_ROWS];
  unsigned used, n = text_top(a->class_count, class_allocs, top, &used);
  if (n) {
    text_table_head(b, "busiest size classes", n, used, " used, by allocations):\n",
                    "    class size       allocs        frees   live bytes   misses  slabs mag\n");
    for (unsigned i = 0; i < n; i++) {
      const magpie_area_class_t *r = SNAP_CLASS(top[i]);
      report_str(b, "  ");
      text_cell(b, r->size, 12, true);
      text_cell(b, r->allocs, 13, true);
      text_cell(b, r->frees, 13, true);
      report_bytes_width(b, r->live_bytes, 13);
      text_cell(b, r->misses, 9, true);
      text_cell(b, r->slabs, 7, true);
      text_cell(b, r->mag_rounds, 4, false);
      report_str(b, "\n");
    }
  }
  if (a->large_allocs || a->large_frees) {
    report_str(b, "  large allocations: ");
    report_count_width(b, a->large_allocs, 0);
    report_str(b, " allocs, ");
    report_count_width(b, a->large_frees, 0);
    report_str(b, " frees\n");
  }
  n = text_top(a->lock_count, lock_waited, top, &used);
  if (n) {
    text_table_head(b, "most contended locks", n, used, " contended, by time waited):\n",
                    "    lock                   acquisitions    contended    waited ms\n");
    for (unsigned i = 0; i < n; i++) {
      const magpie_area_lock_t *r = SNAP_LOCK(top[i]);
      report_str(b, "    ");
      report_str_width(b, r->name, 20);
      text_cell(b, r->acquisitions, 15, true);
      text_cell(b, r->contended, 13, true);
      text_cell(b, r->wait_ns / 1000000, 13, true);
      report_str(b, "\n");
    }
  }
}
