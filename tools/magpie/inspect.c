/* inspect: what the tool shows of a running process's live statistics (live.h): `magpie stats
 * PID [--json]` (one snapshot, as text or one JSON object) and the lines `magpie run --record`
 * appends (one JSON object per snapshot, for `magpie plot`). docs/stats.md lists the keys. */
#include "inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

#define INSPECT_TOP 10 /* rows of the text tables */

static void json_totals(FILE *out, const magpie_area_t *h) {
  fprintf(out,
          "\"pid\":%" PRIu64 ",\"rss_bytes\":%" PRIu64 ",\"live_bytes\":%" PRIu64
          ",\"cached_bytes\":%" PRIu64 ",\"mapped_bytes\":%" PRIu64 ",\"huge_bytes\":%" PRIu64
          ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64 ",\"bytes_requested\":%" PRIu64
          ",\"peak_live_bytes\":%" PRIu64 ",\"peak_mapped_bytes\":%" PRIu64
          ",\"rounding_bytes\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"threads_live\":%" PRIu64
          ",\"published\":%" PRIu64,
          h->pid, h->rss_bytes, h->live_bytes, h->cached_bytes, h->mapped_bytes, h->huge_bytes,
          h->allocs, h->frees, h->bytes_requested, h->peak_live_bytes, h->peak_mapped_bytes,
          h->rounding_bytes, h->misses, h->threads_live, h->published);
}

static void json_classes(FILE *out, const live_snapshot_t *s, int full) {
  fputs("\"classes\":[", out);
  for (uint32_t i = 0, first = 1; i < s->head.class_count; i++) {
    const magpie_area_class_t *c = &s->classes[i];
    if (c->kind != 0) continue;
    fprintf(out,
            "%s{\"size\":%" PRIu64 ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64
            ",\"live_bytes\":%" PRIu64,
            first ? "" : ",", c->size, c->allocs, c->frees, c->live_bytes);
    first = 0;
    if (full)
      fprintf(out,
              ",\"class\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"depot_exchanges\":%" PRIu64
              ",\"mag_rounds\":%" PRIu64 ",\"cached_mags\":%" PRIu64 ",\"cached_depot\":%" PRIu64
              ",\"slabs\":%" PRIu64 ",\"slab_objects\":%" PRIu64 ",\"slab_objects_out\":%" PRIu64
              ",\"rounding_bytes\":%" PRIu64 ",\"swept\":%" PRIu64,
              c->index, c->misses, c->depot_exchanges, c->mag_rounds, c->cached_mags,
              c->cached_depot, c->slabs, c->slab_objects, c->slab_objects_out, c->rounding_bytes,
              c->swept);
    fputc('}', out);
  }
  fputc(']', out);
}

static void json_locks(FILE *out, const live_snapshot_t *s) {
  fputs("\"locks\":[", out);
  for (uint32_t i = 0; i < s->head.lock_count; i++) {
    const magpie_area_lock_t *l = &s->locks[i];
    fprintf(out,
            "%s{\"name\":\"%.32s\",\"acquisitions\":%" PRIu64 ",\"contended\":%" PRIu64
            ",\"wait_ns\":%" PRIu64 "}",
            i ? "," : "", l->name, l->acquisitions, l->contended, l->wait_ns);
  }
  fputc(']', out);
}

static void json_threads(FILE *out, const live_snapshot_t *s) {
  fputs("\"threads\":[", out);
  for (uint32_t i = 0; i < s->head.thread_count; i++) {
    const magpie_area_thread_t *t = &s->threads[i];
    fprintf(out,
            "%s{\"tid\":%" PRIu64 ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64
            ",\"misses\":%" PRIu64 ",\"bytes_requested\":%" PRIu64 "}",
            i ? "," : "", t->tid, t->allocs, t->frees, t->misses, t->bytes_requested);
  }
  fputc(']', out);
}

void inspect_json(FILE *out, const live_snapshot_t *s) {
  fprintf(out, "{\"layout\":\"%u.%u\",", s->head.major, s->head.minor);
  json_totals(out, &s->head);
  fputc(',', out);
  json_classes(out, s, 1);
  fputc(',', out);
  json_locks(out, s);
  fputc(',', out);
  json_threads(out, s);
  fputs("}\n", out);
}

void inspect_record_line(FILE *out, double t, const live_snapshot_t *s) {
  fprintf(out, "{\"t\":%.3f,", t);
  json_totals(out, &s->head);
  fputc(',', out);
  json_classes(out, s, 0);
  fputs("}\n", out);
}

void inspect_record_tick(void *recorder, pid_t pid) {
  inspect_recorder_t *r = recorder;
  char why[256];
  if (!r->area && live_open(pid, &r->area, why, sizeof why) != LIVE_OK) return; /* not yet */
  live_snapshot_t s;
  if (live_read(r->area, &s, why, sizeof why) != LIVE_OK) return;
  if (s.head.published != r->last_published) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t =
        (double)(now.tv_sec - r->start.tv_sec) + (double)(now.tv_nsec - r->start.tv_nsec) / 1e9;
    inspect_record_line(r->out, t, &s);
    fflush(r->out);
    r->last_published = s.head.published;
    r->lines++;
  }
  live_snapshot_free(&s);
}

static const live_snapshot_t *sort_snap;

static int by_allocs(const void *a, const void *b) {
  const magpie_area_class_t *x = &sort_snap->classes[*(const uint32_t *)a];
  const magpie_area_class_t *y = &sort_snap->classes[*(const uint32_t *)b];
  return (x->allocs < y->allocs) - (x->allocs > y->allocs);
}

static int by_operations(const void *a, const void *b) {
  const magpie_area_thread_t *x = &sort_snap->threads[*(const uint32_t *)a];
  const magpie_area_thread_t *y = &sort_snap->threads[*(const uint32_t *)b];
  uint64_t u = x->allocs + x->frees, v = y->allocs + y->frees;
  return (u < v) - (u > v);
}

static int by_wait(const void *a, const void *b) {
  const magpie_area_lock_t *x = &sort_snap->locks[*(const uint32_t *)a];
  const magpie_area_lock_t *y = &sort_snap->locks[*(const uint32_t *)b];
  if (x->wait_ns != y->wait_ns) return (x->wait_ns < y->wait_ns) - (x->wait_ns > y->wait_ns);
  return (x->contended < y->contended) - (x->contended > y->contended);
}

void inspect_text(FILE *out, const live_snapshot_t *s) {
  const magpie_area_t *h = &s->head;
  fprintf(out, "== magpie (pid %" PRIu64 ", snapshot %" PRIu64 ")\n", h->pid, h->published);
  const struct {
    const char *label;
    uint64_t v;
  } rows[] = {
      {"allocations", h->allocs},         {"frees", h->frees},
      {"live bytes", h->live_bytes},      {"cached bytes", h->cached_bytes},
      {"mapped bytes", h->mapped_bytes},  {"RSS bytes", h->rss_bytes},
      {"huge-page bytes", h->huge_bytes}, {"lost to rounding", h->rounding_bytes},
      {"threads", h->threads_live},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    fprintf(out, "  %-20s %15" PRIu64 "\n", rows[i].label, rows[i].v);
  uint32_t *order = malloc(sizeof *order * (h->class_count + h->lock_count + h->thread_count + 1));
  if (!order) return;
  sort_snap = s;
  uint32_t n = 0;
  for (uint32_t i = 0; i < h->class_count; i++)
    if (s->classes[i].kind == 0 && s->classes[i].allocs) order[n++] = i;
  qsort(order, n, sizeof *order, by_allocs);
  if (n) {
    fprintf(out, "  busiest size classes (%u of %u used):\n", n < INSPECT_TOP ? n : INSPECT_TOP, n);
    fprintf(out, "    %10s %14s %14s %14s %10s %6s %4s\n", "size", "allocs", "frees", "live bytes",
            "misses", "slabs", "mag");
    for (uint32_t i = 0; i < n && i < INSPECT_TOP; i++) {
      const magpie_area_class_t *c = &s->classes[order[i]];
      fprintf(out,
              "    %10" PRIu64 " %14" PRIu64 " %14" PRIu64 " %14" PRIu64 " %10" PRIu64 " %6" PRIu64
              " %4" PRIu64 "\n",
              c->size, c->allocs, c->frees, c->live_bytes, c->misses, c->slabs, c->mag_rounds);
    }
  }
  n = 0;
  for (uint32_t i = 0; i < h->lock_count; i++)
    if (s->locks[i].contended) order[n++] = i;
  qsort(order, n, sizeof *order, by_wait);
  if (n) {
    fprintf(out, "  most contended locks (%u of %u contended):\n",
            n < INSPECT_TOP ? n : INSPECT_TOP, n);
    fprintf(out, "    %-20s %14s %12s %12s\n", "lock", "acquisitions", "contended", "waited ms");
    for (uint32_t i = 0; i < n && i < INSPECT_TOP; i++) {
      const magpie_area_lock_t *l = &s->locks[order[i]];
      fprintf(out, "    %-20.32s %14" PRIu64 " %12" PRIu64 " %12.3f\n", l->name, l->acquisitions,
              l->contended, (double)l->wait_ns / 1e6);
    }
  }
  n = 0;
  for (uint32_t i = 0; i < h->thread_count; i++)
    order[n++] = i;
  qsort(order, n, sizeof *order, by_operations);
  if (n) {
    fprintf(out, "  busiest threads (%u of %" PRIu64 " live):\n", n < INSPECT_TOP ? n : INSPECT_TOP,
            h->threads_live);
    fprintf(out, "    %10s %14s %14s %10s %16s\n", "thread", "allocs", "frees", "misses",
            "bytes asked");
    for (uint32_t i = 0; i < n && i < INSPECT_TOP; i++) {
      const magpie_area_thread_t *t = &s->threads[order[i]];
      fprintf(out, "    %10" PRIu64 " %14" PRIu64 " %14" PRIu64 " %10" PRIu64 " %16" PRIu64 "\n",
              t->tid, t->allocs, t->frees, t->misses, t->bytes_requested);
    }
  }
  free(order);
}
