/*
 * stats_json: the snapshot as JSON (docs/stats.md: its schema, MAGPIE_STATS_SCHEMA), one line.
 *
 * Theory
 *   1. Built with diag's text builder from the snapshot (stats_lock held), in stats.c's order:
 *      the process's figures, then the classes, object caches, locks, CPUs, threads, large
 *      blocks and huge pages. Names are the library's own: nothing to escape.
 */
#include "options.h"
#include "report.h"
#include "stats.h"
#include "stats_impl.h"

/* ,"key":v */
static void json_field(report_buf_t *b, const char *key, uint64_t v) {
  report_str(b, ",\"");
  report_str(b, key);
  report_str(b, "\":");
  report_dec(b, v);
}

static void json_name(report_buf_t *b, const char *name) {
  report_str(b, "{\"name\":\""); /* names are the library's own: no quotes or controls */
  report_str(b, name);
  report_str(b, "\"");
}

typedef struct json_figure {
  const char *key;
  uint64_t v;
} json_figure_t;

static void json_figures(report_buf_t *b, const json_figure_t *f, size_t n) {
  for (size_t i = 0; i < n; i++)
    json_field(b, f[i].key, f[i].v);
}

/* A class's or object cache's figures, after its "class" or "name" (docs/stats.md). */
static void json_cache_figures(report_buf_t *b, const magpie_area_class_t *r) {
  const json_figure_t figures[] = {
      {"size", r->size},
      {"allocs", r->allocs},
      {"frees", r->frees},
      {"live_bytes", r->live_bytes},
      {"misses", r->misses},
      {"depot_exchanges", r->depot_exchanges},
      {"mag_rounds", r->mag_rounds},
      {"cached", r->cached_mags + r->cached_depot},
      {"cached_mags", r->cached_mags},
      {"cached_depot", r->cached_depot},
      {"depot_full", r->depot_full_mags},
      {"depot_empty", r->depot_empty_mags},
      {"slabs", r->slabs},
      {"slabs_owned", r->slabs_owned},
      {"slab_objects", r->slab_objects},
      {"slab_objects_out", r->slab_objects_out},
      {"rounding_bytes", r->rounding_bytes},
      {"swept", r->swept},
  };
  json_figures(b, figures, sizeof figures / sizeof figures[0]);
}

void stats_write_json(report_buf_t *b) {
  const magpie_area_t *a = SNAP;
  report_str(b, "{\"magpie\":1,\"schema\":");
  report_dec(b, MAGPIE_STATS_SCHEMA);
  const json_figure_t top[] = {
      {"pid", a->pid},
      {"allocs", a->allocs},
      {"frees", a->frees},
      {"bytes_requested", a->bytes_requested},
      {"live_bytes", a->live_bytes},
      {"peak_live_bytes", a->peak_live_bytes},
      {"cached_bytes", a->cached_bytes},
      {"mapped_bytes", a->mapped_bytes},
      {"peak_mapped_bytes", a->peak_mapped_bytes},
      {"rss_bytes", a->rss_bytes},
      {"huge_bytes", a->huge_bytes},
      {"rounding_bytes", a->rounding_bytes},
      {"misses", a->misses},
      {"threads_live", a->threads_live},
      {"threads_total", a->threads_total},
      {"cpus", a->cpus},
      {"memory_limit", os_memory_limit()},
      {"retain", opt.retain},
      {"rseq", os_rseq_available()},
      {"percpu", a->percpu},
  };
  json_figures(b, top, sizeof top / sizeof top[0]);
  for (uint64_t kind = 0; kind < 2; kind++) {
    report_str(b, kind ? "],\"object_caches\":[" : ",\"classes\":[");
    for (uint32_t i = 0, first = 1; i < a->class_count; i++) {
      const magpie_area_class_t *r = SNAP_CLASS(i);
      if (r->kind != kind) continue;
      if (!first) report_str(b, ",");
      first = 0;
      if (kind) {
        json_name(b, r->name);
      } else {
        report_str(b, "{\"class\":");
        report_dec(b, r->index);
      }
      json_cache_figures(b, r);
      report_str(b, "}");
    }
  }
  report_str(b, "],\"locks\":[");
  for (uint32_t i = 0; i < a->lock_count; i++) {
    const magpie_area_lock_t *r = SNAP_LOCK(i);
    if (i) report_str(b, ",");
    json_name(b, r->name);
    json_field(b, "acquisitions", r->acquisitions);
    json_field(b, "contended", r->contended);
    json_field(b, "wait_ns", r->wait_ns);
    report_str(b, "}");
  }
  report_str(b, "],\"cpus_misses\":[");
  for (uint32_t i = 0; i < a->cpu_count; i++) {
    if (i) report_str(b, ",");
    report_dec(b, SNAP_CPU(i)->misses);
  }
  report_str(b, "],\"threads\":[");
  for (uint32_t i = 0; i < a->thread_count; i++) {
    const magpie_area_thread_t *t = SNAP_THREAD(i);
    report_str(b, i ? ",{\"tid\":" : "{\"tid\":");
    report_dec(b, t->tid);
    json_field(b, "allocs", t->allocs);
    json_field(b, "frees", t->frees);
    json_field(b, "misses", t->misses);
    json_field(b, "bytes_requested", t->bytes_requested);
    report_str(b, "}");
  }
  report_str(b, "],\"large\":{\"allocs\":");
  report_dec(b, a->large_allocs);
  json_field(b, "frees", a->large_frees);
  json_field(b, "live_bytes", a->large_live_bytes);
  const hugepage_stats_t *h = &stats_huge;
  report_str(b, "},\"hugepages\":{\"mode\":\"");
  report_str(b, h->mode);
  report_str(b, "\",\"thp\":\"");
  report_str(b, h->thp);
  report_str(b, "\"");
  json_field(b, "on", h->on);
  json_field(b, "huge_bytes", h->huge_bytes);
  json_field(b, "slab_bytes", h->slab_bytes);
  json_field(b, "partial_free_bytes", h->partial_free_bytes);
  json_field(b, "slab_hollow_bytes", h->slab_hollow_bytes);
  json_field(b, "slab_stashed_bytes", h->slab_stashed_bytes);
  json_field(b, "collapses", h->collapses);
  json_field(b, "collapse_failures", h->collapse_failures);
  json_field(b, "subreleases", h->subreleases);
  report_str(b, "}}\n");
}
