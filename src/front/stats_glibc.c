/*
 * stats_glibc: glibc's report formats with magpie's figures: malloc_stats and malloc_info
 * (mallinfo's fields are filled in api.c).
 *
 * Theory
 *   1. Programs and scripts parse glibc's layouts, so the layouts are glibc's, the figures
 *      magpie's: its one heap stands for glibc's arena 0, its large blocks for glibc's mmapped
 *      chunks. No value is truncated to 32 bits.
 */
#include "report.h"
#include "stats.h"
#include "stats_impl.h"

#include <string.h>

/* glibc's malloc_stats layout, which programs and scripts parse: magpie's one heap is
   "Arena 0" (everything but large blocks), and large blocks stand for glibc's mmapped chunks,
   the blocks too big for its arenas. Values are never truncated to 32 bits. */
void stats_write_glibc(int fd) {
  stats_summary_t s;
  stats_summary(&s);
  uint64_t small_mapped =
      s.mapped_bytes > s.large_live_bytes ? s.mapped_bytes - s.large_live_bytes : 0;
  const struct {
    const char *label;
    uint64_t value;
  } lines[] = {
      {"Arena 0:\n", 0},
      {"system bytes     = ", small_mapped},
      {"in use bytes     = ", s.live_bytes - s.large_live_bytes},
      {"Total (incl. mmap):\n", 0},
      {"system bytes     = ", s.mapped_bytes},
      {"in use bytes     = ", s.live_bytes},
      {"max mmap regions = ", s.large_peak_blocks},
      {"max mmap bytes   = ", s.large_peak_bytes},
  };
  report_buf_t b = {.to_fd = true, .fd = fd};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    report_str(&b, lines[i].label);
    if (lines[i].label[strlen(lines[i].label) - 1] == '\n') continue; /* a heading */
    report_dec_width(&b, lines[i].value, 10);
    report_str(&b, "\n");
  }
  report_flush(&b);
}

/* <tag a="v" ...> */
static void xml_attr(report_buf_t *b, const char *name, uint64_t v) {
  report_str(b, " ");
  report_str(b, name);
  report_str(b, "=\"");
  report_dec(b, v);
  report_str(b, "\"");
}

/* <NAME type="TYPE" count="N" size="N"/>, a negative count left out. */
static void xml_figure(report_buf_t *b, const char *name, const char *type, int64_t count,
                       uint64_t size) {
  report_str(b, "<");
  report_str(b, name);
  report_str(b, " type=\"");
  report_str(b, type);
  report_str(b, "\"");
  if (count >= 0) xml_attr(b, "count", (uint64_t)count);
  xml_attr(b, "size", size);
  report_str(b, "/>\n");
}

/* One class's free objects, as malloc_info shows them. */
typedef struct xml_class {
  uint64_t index, size, mags, depot;
} xml_class_t;

/* glibc's malloc_info element layout: one heap (magpie's arena), a <size> per class holding
   free objects (from..to: the requests it serves; total: the bytes free in it; count: the
   objects), glibc's totals (fast: free in magazines; rest: free in depots; mmap: large blocks)
   and system figures, for the heap and the process. Magpie adds <total type="live">: blocks
   the program holds. The figures are copied out of the snapshot and the lock let go before
   any text goes out: b's sink is the caller's FILE, whose writes are cancellation points. */
void stats_write_xml(report_buf_t *b) {
  xml_class_t rows[SC_COUNT];
  unsigned n = 0;
  lock_acquire(&stats_lock);
  stats_snapshot(false);
  magpie_area_t a = *SNAP;
  for (uint32_t i = 0; i < a.class_count && n < SC_COUNT; i++) {
    const magpie_area_class_t *r = SNAP_CLASS(i);
    if (r->kind == 0) rows[n++] = (xml_class_t){r->index, r->size, r->cached_mags, r->cached_depot};
  }
  lock_release(&stats_lock);
  uint64_t mags = 0, mags_n = 0, depot = 0, depot_n = 0;
  report_str(b, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
  for (unsigned i = 0; i < n; i++) {
    const xml_class_t *r = &rows[i];
    mags += r->mags * r->size;
    mags_n += r->mags;
    depot += r->depot * r->size;
    depot_n += r->depot;
    if (!r->mags && !r->depot) continue;
    report_str(b, "  <size");
    xml_attr(b, "from", r->index > 1 ? sc_size(r->index - 1) + 1 : 1);
    xml_attr(b, "to", r->size);
    xml_attr(b, "total", (r->mags + r->depot) * r->size);
    xml_attr(b, "count", r->mags + r->depot);
    report_str(b, "/>\n");
  }
  report_str(b, "</sizes>\n");
  uint64_t heap = a.mapped_bytes > a.large_live_bytes ? a.mapped_bytes - a.large_live_bytes : 0;
  for (int whole = 0; whole < 2; whole++) {
    xml_figure(b, "total", "fast", (int64_t)mags_n, mags);
    xml_figure(b, "total", "rest", (int64_t)depot_n, depot);
    if (whole) {
      xml_figure(b, "total", "mmap", (int64_t)(a.large_allocs - a.large_frees), a.large_live_bytes);
      xml_figure(b, "total", "live", (int64_t)(a.allocs - a.frees), a.live_bytes);
    }
    xml_figure(b, "system", "current", -1, whole ? a.mapped_bytes : heap);
    xml_figure(b, "system", "max", -1, a.peak_mapped_bytes);
    xml_figure(b, "aspace", "total", -1, whole ? a.mapped_bytes : heap);
    xml_figure(b, "aspace", "mprotect", -1, whole ? a.mapped_bytes : heap);
    report_str(b, whole ? "</malloc>\n" : "</heap>\n");
  }
  report_flush(b);
}
