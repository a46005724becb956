/*
 * stats: what magpie did, as text or JSON, without allocating.
 *
 * Theory
 *   1. Counting costs the fast path nothing shared: each thread bumps counters in its own
 *      tcache (mag.c); a report sums them over live threads and adds the folded totals of
 *      exited ones. Slab and depot figures are read under their locks.
 *   2. Live bytes are exact at class granularity (allocs - frees per class, times the class
 *      size, plus large blocks). Peak live bytes is the peak of "held" bytes - objects threads
 *      took from the shared layers, in their magazines or live - tracked at each magazine
 *      movement: an upper bound of the true peak, within two magazines per thread and class.
 *   3. Reports are built with diag's text builder (report_buf.h), in a buffer on the stack,
 *      and written with write(2), so they work at exit, in a signal-free context with a
 *      damaged heap, and from malloc_stats.
 */
#include "stats.h"
#include "cache.h"
#include "debug.h"
#include "export.h"
#include "hugepage.h"
#include "init.h"
#include "large.h"
#include "mag.h"
#include "options.h"
#include "os.h"
#include "prof.h"
#include "report.h"
#include "sample.h"
#include "slab.h"

#include <string.h>

static mag_totals_t stats_totals_buf; /* mag_totals' result; large, so not on the stack */
static lock_t stats_lock = LOCK_INIT; /* protects stats_totals_buf */

static void stats_fill(stats_summary_t *s, mag_totals_t *t) {
  uint64_t profiled_pages; /* sampled small blocks, moved from the large figures to their class */
  prof_class_totals(t, &profiled_pages);
  memset(s, 0, sizeof *s);
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    s->allocs += t->allocs[c];
    s->frees += t->frees[c];
    if (t->allocs[c] > t->frees[c]) s->live_bytes += (t->allocs[c] - t->frees[c]) * sc_info[c].size;
  }
  uint64_t allocs, frees, live;
  if (debug_on) /* debug mode serves every block itself */
    debug_totals(&allocs, &frees, &live);
  else /* sampled blocks bypass the threads' counters too */
    sample_totals(&allocs, &frees, &live);
  s->allocs += allocs;
  s->frees += frees;
  s->live_bytes += live;
  s->large_allocs = t->large_allocs;
  s->large_frees = t->large_frees;
  s->allocs += t->large_allocs;
  s->frees += t->large_frees;
  s->large_live_bytes = large_live_bytes();
  s->large_live_bytes -=
      profiled_pages < s->large_live_bytes ? profiled_pages : s->large_live_bytes;
  size_t peak_blocks, peak_bytes;
  large_peaks(&peak_blocks, &peak_bytes);
  s->large_peak_blocks = peak_blocks;
  s->large_peak_bytes = peak_bytes;
  s->live_bytes += s->large_live_bytes;
  s->bytes_requested = t->bytes_requested;
  s->peak_live_bytes = mag_held_peak();
  if (s->peak_live_bytes < s->live_bytes) s->peak_live_bytes = s->live_bytes;
  s->mapped_bytes = os_mapped_bytes();
  s->peak_mapped_bytes = os_mapped_peak();
  s->threads_live = t->threads_live;
  s->threads_ever = t->threads_ever;
}

void stats_summary(stats_summary_t *out) {
  lock_acquire(&stats_lock);
  mag_totals(&stats_totals_buf);
  stats_fill(out, &stats_totals_buf);
  lock_release(&stats_lock);
}

/* ---- output (diag's text builder, written to the descriptor asked for) ---- */

/* One figure: ,"key":v in JSON; a line "  key<padding>v" in text, v right-aligned. */
static void stats_field(report_buf_t *b, const char *key, uint64_t v, bool json) {
  if (json) {
    report_str(b, ",\"");
    report_str(b, key);
    report_str(b, "\":");
    report_dec(b, v);
  } else {
    report_str(b, "  ");
    report_str_width(b, key, 20);
    report_dec_width(b, v, 16);
    report_str(b, "\n");
  }
}

typedef struct cache_figures {
  uint64_t slabs, objects_out, depot_full, mag_cap, exchanges;
} cache_figures_t;

static void cache_figures(cache_t *cp, cache_figures_t *f) {
  lock_acquire(&cp->slab_lock);
  f->slabs = cp->slabs;
  f->objects_out = cp->slab_objects_out;
  lock_release(&cp->slab_lock);
  lock_acquire(&cp->depot.lock);
  f->depot_full = cp->depot.nfull;
  f->mag_cap = cp->depot.cap;
  f->exchanges = cp->depot.exchanges;
  lock_release(&cp->depot.lock);
}

/* The huge-page block (hugepage.c): the choice, the kernel's mode and what came of them. */
static void stats_hugepages(report_buf_t *b, bool json) {
  hugepage_stats_t h;
  hugepage_stats(&h);
  report_str(b, json ? ",\"hugepages\":{\"mode\":\"" : "  huge pages (hugepages=");
  report_str(b, h.mode);
  report_str(b, json ? "\",\"thp\":\"" : ", kernel THP ");
  report_str(b, h.thp);
  report_str(b, json ? "\"" : ")\n");
  stats_field(b, "on", h.on, json);
  stats_field(b, "huge_bytes", h.huge_bytes, json);
  stats_field(b, "slab_bytes", h.slab_bytes, json);
  stats_field(b, "partial_free_bytes", h.partial_free_bytes, json);
  stats_field(b, "collapses", h.collapses, json);
  stats_field(b, "collapse_failures", h.collapse_failures, json);
  stats_field(b, "subreleases", h.subreleases, json);
  if (json) report_str(b, "}");
}

void stats_write(int fd, int format) {
  magpie_init(); /* a report may be the program's first call: the arenas must exist */
  bool json = format == MAGPIE_STATS_JSON;
  report_buf_t b = {.to_fd = true, .fd = fd};
  stats_summary_t s;
  lock_acquire(&stats_lock);
  mag_totals(&stats_totals_buf);
  stats_fill(&s, &stats_totals_buf);
  if (json) {
    report_str(&b, "{\"magpie\":1");
    stats_field(&b, "pid", (uint64_t)os_getpid(), true);
  } else {
    report_str(&b, "magpie statistics (pid ");
    report_dec(&b, (uint64_t)os_getpid());
    report_str(&b, ")\n");
  }
  stats_field(&b, "allocs", s.allocs, json);
  stats_field(&b, "frees", s.frees, json);
  stats_field(&b, "bytes_requested", s.bytes_requested, json);
  stats_field(&b, "live_bytes", s.live_bytes, json);
  stats_field(&b, "peak_live_bytes", s.peak_live_bytes, json);
  stats_field(&b, "mapped_bytes", s.mapped_bytes, json);
  stats_field(&b, "peak_mapped_bytes", s.peak_mapped_bytes, json);
  stats_field(&b, "rss_bytes", os_rss_bytes(), json);
  stats_field(&b, "threads_live", s.threads_live, json);
  stats_field(&b, "threads_total", s.threads_ever, json);
  stats_field(&b, "cpus", os_cpu_count(), json);
  stats_field(&b, "memory_limit", os_memory_limit(), json);
  stats_field(&b, "retain", opt.retain, json);
  stats_field(&b, "rseq", os_rseq_available(), json);
  stats_field(&b, "percpu", mag_percpu(), json);
  report_str(&b, json ? ",\"classes\":["
                      : "  class     size       allocs        frees   slabs  cached  depot mag\n");
  bool first = true;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    cache_figures_t f;
    cache_figures(&malloc_caches[c], &f);
    if (!stats_totals_buf.allocs[c] && !f.slabs) continue;
    uint64_t live = stats_totals_buf.allocs[c] - stats_totals_buf.frees[c];
    uint64_t cached = f.objects_out > live ? f.objects_out - live : 0;
    if (json) {
      report_str(&b, first ? "{\"class\":" : ",{\"class\":");
      report_dec(&b, c);
      stats_field(&b, "size", sc_info[c].size, true);
      stats_field(&b, "allocs", stats_totals_buf.allocs[c], true);
      stats_field(&b, "frees", stats_totals_buf.frees[c], true);
      stats_field(&b, "slabs", f.slabs, true);
      stats_field(&b, "cached", cached, true);
      stats_field(&b, "depot_full", f.depot_full, true);
      stats_field(&b, "mag_rounds", f.mag_cap, true);
      stats_field(&b, "depot_exchanges", f.exchanges, true);
      report_str(&b, "}");
    } else {
      report_dec_width(&b, c, 7);
      report_dec_width(&b, sc_info[c].size, 9);
      report_dec_width(&b, stats_totals_buf.allocs[c], 13);
      report_dec_width(&b, stats_totals_buf.frees[c], 13);
      report_dec_width(&b, f.slabs, 8);
      report_dec_width(&b, cached, 8);
      report_dec_width(&b, f.depot_full, 7);
      report_dec_width(&b, f.mag_cap, 4);
      report_str(&b, "\n");
    }
    first = false;
  }
  lock_release(&stats_lock);
  if (json) {
    report_str(&b, "],\"large\":{\"allocs\":");
    report_dec(&b, s.large_allocs);
    stats_field(&b, "frees", s.large_frees, true);
    stats_field(&b, "live_bytes", s.large_live_bytes, true);
    report_str(&b, "}");
    stats_hugepages(&b, true);
    report_str(&b, "}\n");
  } else {
    report_str(&b, "  large blocks\n");
    stats_field(&b, "allocs", s.large_allocs, false);
    stats_field(&b, "frees", s.large_frees, false);
    stats_field(&b, "live_bytes", s.large_live_bytes, false);
    stats_hugepages(&b, false);
  }
  report_flush(&b);
}

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

void stats_fork_prepare(void) {
  lock_acquire(&stats_lock);
}
void stats_fork_parent(void) {
  lock_release(&stats_lock);
}
void stats_fork_child(void) {
  lock_init(&stats_lock);
}

MAGPIE_EXPORT int magpie_stats_write(int fd, int format) {
  if (fd < 0 || (format != MAGPIE_STATS_TEXT && format != MAGPIE_STATS_JSON)) return -1;
  stats_write(fd, format);
  return 0;
}

void stats_at_exit(void) {
  if (opt.stats == OPT_STATS_OFF) return;
  int fd = -1;
  if (opt.stats_file[0]) {
    char path[sizeof opt.stats_file + REPORT_DEC_MAX];
    report_expand_pid(path, sizeof path, opt.stats_file);
    if ((fd = os_open_write(path)) < 0) return;
  }
  stats_write(fd >= 0 ? fd : report_stderr(),
              opt.stats == OPT_STATS_JSON ? MAGPIE_STATS_JSON : MAGPIE_STATS_TEXT);
  if (fd >= 0) os_close(fd);
}
