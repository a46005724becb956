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
 *   3. Reports are built in a stack buffer and written with write(2), so they work at exit,
 *      in a signal-free context with a damaged heap, and from malloc_stats.
 */
#include "stats.h"
#include "cache.h"
#include "debug.h"
#include "export.h"
#include "large.h"
#include "mag.h"
#include "options.h"
#include "os.h"
#include "report.h"
#include "sample.h"
#include "slab.h"

#include <string.h>

static mag_totals_t stats_totals_buf; /* mag_totals' result; large, so not on the stack */
static lock_t stats_lock = LOCK_INIT; /* protects stats_totals_buf */

static void stats_fill(stats_summary_t *s, const mag_totals_t *t) {
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

/* ---- output ---- */

typedef struct out {
  int fd;
  size_t len;
  char buf[2048];
} out_t;

static void out_flush(out_t *o) {
  os_write_all(o->fd, o->buf, o->len);
  o->len = 0;
}

static void out_str(out_t *o, const char *s) {
  for (; *s; s++) {
    if (o->len == sizeof o->buf) out_flush(o);
    o->buf[o->len++] = *s;
  }
}

/* Unsigned decimal, right-aligned in width characters (0: no padding). */
static void out_num(out_t *o, uint64_t v, int width) {
  char s[REPORT_DEC_MAX];
  for (int pad = width - report_format_dec(s, v); pad > 0; pad--)
    out_str(o, " ");
  out_str(o, s);
}

static void out_field(out_t *o, const char *key, uint64_t v, bool json) {
  if (json) {
    out_str(o, ",\"");
    out_str(o, key);
    out_str(o, "\":");
    out_num(o, v, 0);
  } else {
    out_str(o, "  ");
    out_str(o, key);
    for (size_t pad = strlen(key); pad < 20; pad++)
      out_str(o, " ");
    out_num(o, v, 16);
    out_str(o, "\n");
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

void stats_write(int fd, int format) {
  bool json = format == MAGPIE_STATS_JSON;
  out_t o = {.fd = fd, .len = 0};
  stats_summary_t s;
  lock_acquire(&stats_lock);
  mag_totals(&stats_totals_buf);
  stats_fill(&s, &stats_totals_buf);
  if (json) {
    out_str(&o, "{\"magpie\":1");
    out_field(&o, "pid", (uint64_t)os_getpid(), true);
  } else {
    out_str(&o, "magpie statistics (pid ");
    out_num(&o, (uint64_t)os_getpid(), 0);
    out_str(&o, ")\n");
  }
  out_field(&o, "allocs", s.allocs, json);
  out_field(&o, "frees", s.frees, json);
  out_field(&o, "bytes_requested", s.bytes_requested, json);
  out_field(&o, "live_bytes", s.live_bytes, json);
  out_field(&o, "peak_live_bytes", s.peak_live_bytes, json);
  out_field(&o, "mapped_bytes", s.mapped_bytes, json);
  out_field(&o, "peak_mapped_bytes", s.peak_mapped_bytes, json);
  out_field(&o, "rss_bytes", os_rss_bytes(), json);
  out_field(&o, "threads_live", s.threads_live, json);
  out_field(&o, "threads_total", s.threads_ever, json);
  out_field(&o, "cpus", os_cpu_count(), json);
  out_field(&o, "rseq", os_rseq_available(), json);
  out_field(&o, "percpu", mag_percpu(), json);
  out_str(&o, json ? ",\"classes\":["
                   : "  class     size       allocs        frees   slabs  cached  depot mag\n");
  bool first = true;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    cache_figures_t f;
    cache_figures(&malloc_caches[c], &f);
    if (!stats_totals_buf.allocs[c] && !f.slabs) continue;
    uint64_t live = stats_totals_buf.allocs[c] - stats_totals_buf.frees[c];
    uint64_t cached = f.objects_out > live ? f.objects_out - live : 0;
    if (json) {
      out_str(&o, first ? "{\"class\":" : ",{\"class\":");
      out_num(&o, c, 0);
      out_field(&o, "size", sc_info[c].size, true);
      out_field(&o, "allocs", stats_totals_buf.allocs[c], true);
      out_field(&o, "frees", stats_totals_buf.frees[c], true);
      out_field(&o, "slabs", f.slabs, true);
      out_field(&o, "cached", cached, true);
      out_field(&o, "depot_full", f.depot_full, true);
      out_field(&o, "mag_rounds", f.mag_cap, true);
      out_field(&o, "depot_exchanges", f.exchanges, true);
      out_str(&o, "}");
    } else {
      out_num(&o, c, 7);
      out_num(&o, sc_info[c].size, 9);
      out_num(&o, stats_totals_buf.allocs[c], 13);
      out_num(&o, stats_totals_buf.frees[c], 13);
      out_num(&o, f.slabs, 8);
      out_num(&o, cached, 8);
      out_num(&o, f.depot_full, 7);
      out_num(&o, f.mag_cap, 4);
      out_str(&o, "\n");
    }
    first = false;
  }
  lock_release(&stats_lock);
  if (json) {
    out_str(&o, "],\"large\":{\"allocs\":");
    out_num(&o, s.large_allocs, 0);
    out_field(&o, "frees", s.large_frees, true);
    out_field(&o, "live_bytes", s.large_live_bytes, true);
    out_str(&o, "}}\n");
  } else {
    out_str(&o, "  large blocks\n");
    out_field(&o, "allocs", s.large_allocs, false);
    out_field(&o, "frees", s.large_frees, false);
    out_field(&o, "live_bytes", s.large_live_bytes, false);
  }
  out_flush(&o);
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
  out_t o = {.fd = fd, .len = 0};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    out_str(&o, lines[i].label);
    if (lines[i].label[strlen(lines[i].label) - 1] == '\n') continue; /* a heading */
    out_num(&o, lines[i].value, 10);
    out_str(&o, "\n");
  }
  out_flush(&o);
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
