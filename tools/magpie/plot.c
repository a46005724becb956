/* plot: `magpie plot FILE [-o OUT.svg]` draws a record written by `magpie run --record FILE` as
 * an SVG picture, with no library: the text is written by hand.
 *
 * Theory
 *   1. A record is JSON Lines, one sample a line: {"t": seconds, "rss_bytes", "live_bytes",
 *      "cached_bytes", "mapped_bytes", "huge_bytes", "allocs", "frees", "classes": [{"size",
 *      "allocs", "frees", "live_bytes"}, ...]}. Lines are read one at a time with json.c's
 *      scanner; keys it does not know are skipped, so a record from a newer library still
 *      draws, and a sample without "t" or a line that does not parse stops the plot with the
 *      line's number. Blank lines are allowed.
 *   2. Two panels share the time axis. The first: the process's RSS, live, cached and mapped
 *      bytes. The second: the live bytes of the busiest classes, the PLOT_CLASSES with the most
 *      allocations by the record's end (the class counters count from the program's start); a
 *      sample where a class is absent counts it as holding nothing.
 *   3. Axes: time in seconds, bytes in the binary unit (B, KiB, MiB, GiB, TiB) that keeps the
 *      largest value of a panel below 1024 of it; ticks at 1, 2 or 5 times a power of ten,
 *      about PLOT_TICKS of them. Each series is one <polyline> whose id names it ("rss",
 *      "live", "cached", "mapped", "class-SIZE"), so tests and scripts find them.
 */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "tool.h"

#define PLOT_CLASSES 5 /* classes drawn in the second panel */
#define PLOT_TICKS 6   /* about this many ticks on an axis */
#define PLOT_WIDTH 960
#define PLOT_PANEL_HEIGHT 300
#define PLOT_LEFT 90   /* room for the byte labels */
#define PLOT_RIGHT 190 /* room for the legend */
#define PLOT_TOP 50    /* above the first panel: the title */
#define PLOT_GAP 70    /* between the panels: the first one's time labels, the second's title */
#define PLOT_BOTTOM 60 /* below the second panel: its time labels and the axis name */

typedef struct class_sample {
  uint64_t size, allocs, frees, live;
} class_sample_t;

typedef struct sample {
  double t;
  uint64_t rss, live, cached, mapped, huge, allocs, frees;
  size_t first_class, nclasses; /* its classes in record_t.classes */
  int has_t;
} sample_t;

typedef struct record {
  sample_t *samples;
  size_t n, cap;
  class_sample_t *classes;
  size_t nclasses, classes_cap;
} record_t;

/* Makes room for one more element of size elem in *v (holding n of cap); -1 when out of memory. */
static int grow(void **v, size_t n, size_t *cap, size_t elem) {
  if (n < *cap) return 0;
  size_t want = *cap ? 2 * *cap : 64;
  void *bigger = realloc(*v, want * elem);
  if (!bigger) return -1;
  *v = bigger;
  *cap = want;
  return 0;
}

/* ---- reading ---- */

typedef struct byte_field {
  const char *key;
  size_t offset;
} byte_field_t;

#define SAMPLE_FIELD(key, field)                                                                   \
  { key, offsetof(sample_t, field) }
static const byte_field_t sample_fields[] = {
    SAMPLE_FIELD("rss_bytes", rss),       SAMPLE_FIELD("live_bytes", live),
    SAMPLE_FIELD("cached_bytes", cached), SAMPLE_FIELD("mapped_bytes", mapped),
    SAMPLE_FIELD("huge_bytes", huge),     SAMPLE_FIELD("allocs", allocs),
    SAMPLE_FIELD("frees", frees),
};

#define CLASS_FIELD(key, field)                                                                    \
  { key, offsetof(class_sample_t, field) }
static const byte_field_t class_fields[] = {
    CLASS_FIELD("size", size),
    CLASS_FIELD("allocs", allocs),
    CLASS_FIELD("frees", frees),
    CLASS_FIELD("live_bytes", live),
};

/* Reads the value of key into base's field named in fields[0..n); skips a key not there. */
static int read_field(scan_t *s, const char *key, void *base, const byte_field_t *fields, size_t n,
                      int depth) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(key, fields[i].key) == 0)
      return scan_u64(s, (uint64_t *)((char *)base + fields[i].offset));
  return scan_skip_value(s, depth);
}

static int class_member(scan_t *s, const char *key, void *ctx) {
  return read_field(s, key, ctx, class_fields, sizeof class_fields / sizeof class_fields[0], 3);
}

static int class_element(scan_t *s, void *ctx) {
  record_t *r = ctx;
  class_sample_t c = {0, 0, 0, 0};
  if (scan_object(s, 2, class_member, &c, NULL, NULL) < 0) return -1;
  if (grow((void **)&r->classes, r->nclasses, &r->classes_cap, sizeof c) < 0)
    return scan_fail(s, "out of memory");
  r->classes[r->nclasses++] = c;
  r->samples[r->n].nclasses++;
  return 0;
}

static int sample_member(scan_t *s, const char *key, void *ctx) {
  record_t *r = ctx;
  sample_t *x = &r->samples[r->n];
  if (strcmp(key, "t") == 0) {
    x->has_t = 1;
    return scan_number(s, &x->t);
  }
  if (strcmp(key, "classes") == 0) {
    x->first_class = r->nclasses; /* a repeated key replaces the earlier one */
    x->nclasses = 0;
    return scan_array(s, 1, class_element, r);
  }
  return read_field(s, key, x, sample_fields, sizeof sample_fields / sizeof sample_fields[0], 1);
}

/* Appends the sample on one line; -1 with *why set when it is not one. */
static int read_sample(record_t *r, const char *line, size_t len, const char **why) {
  scan_t s = {line, line, line + len, NULL};
  if (grow((void **)&r->samples, r->n, &r->cap, sizeof(sample_t)) < 0) {
    *why = "out of memory";
    return -1;
  }
  memset(&r->samples[r->n], 0, sizeof(sample_t));
  r->samples[r->n].first_class = r->nclasses;
  if (scan_object(&s, 0, sample_member, r, NULL, NULL) == 0) {
    scan_ws(&s);
    if (s.p != s.end) scan_fail(&s, "text after the object");
  }
  if (!s.err && !r->samples[r->n].has_t) scan_fail(&s, "a sample without \"t\"");
  if (s.err) {
    *why = s.err;
    return -1;
  }
  r->n++;
  return 0;
}

static int read_record(const char *path, record_t *r) {
  FILE *in = fopen(path, "r");
  if (!in) {
    error("cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t cap = 0, number = 0;
  ssize_t len;
  int rc = 0;
  while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
    number++;
    size_t i = 0;
    while (i < (size_t)len &&
           (line[i] == ' ' || line[i] == '\t' || line[i] == '\n' || line[i] == '\r'))
      i++;
    if (i == (size_t)len) continue; /* blank */
    const char *why;
    if (read_sample(r, line, (size_t)len, &why) < 0) {
      error("%s:%zu: not a record sample: %s", path, number, why);
      rc = -1;
    }
  }
  if (rc == 0 && ferror(in)) {
    error("cannot read %s: %s", path, strerror(errno));
    rc = -1;
  }
  if (rc == 0 && r->n == 0) {
    error("%s: no samples", path);
    rc = -1;
  }
  free(line);
  fclose(in);
  return rc;
}

/* ---- the busiest classes ---- */

/* The size of each distinct class with its allocations by the record's end, most first. */
typedef struct class_total {
  uint64_t size, allocs;
} class_total_t;

static int by_allocs(const void *a, const void *b) {
  const class_total_t *x = a, *y = b;
  if (x->allocs != y->allocs) return x->allocs < y->allocs ? 1 : -1;
  return x->size < y->size ? -1 : x->size > y->size;
}

static size_t busiest_classes(const record_t *r, class_total_t *out, size_t max) {
  class_total_t *all = calloc(r->nclasses ? r->nclasses : 1, sizeof *all);
  size_t n = 0;
  if (!all) return 0;
  for (size_t i = 0; i < r->nclasses; i++) {
    const class_sample_t *c = &r->classes[i];
    size_t j = 0;
    while (j < n && all[j].size != c->size)
      j++;
    if (j == n) all[n++] = (class_total_t){c->size, 0};
    if (c->allocs > all[j].allocs) all[j].allocs = c->allocs; /* cumulative: the latest */
  }
  qsort(all, n, sizeof *all, by_allocs);
  size_t k = n < max ? n : max;
  memcpy(out, all, k * sizeof *all);
  free(all);
  return k;
}

/* ---- drawing ---- */

typedef struct series {
  const char *id, *label, *color;
  double *y; /* one value per sample, in bytes */
} series_t;

/* A tick step of 1, 2 or 5 times a power of ten near range / PLOT_TICKS. */
static double tick_step(double range) {
  double rough = range / PLOT_TICKS, power = pow(10, floor(log10(rough)));
  double steps[] = {1, 2, 5, 10};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (steps[i] * power >= rough) return steps[i] * power;
  return 10 * power;
}

static void put_escaped(FILE *o, const char *text) {
  static const char specials[] = "&<>\"";
  static const char *const entities[] = {"&amp;", "&lt;", "&gt;", "&quot;"};
  for (; *text; text++) {
    const char *special = strchr(specials, *text);
    if (special)
      fputs(entities[special - specials], o);
    else
      fputc(*text, o);
  }
}

/* One panel: its frame, ticks, axis names, series and legend; top is its frame's top edge. */
static void draw_panel(FILE *o, double top, const char *title, const record_t *r,
                       const series_t *series, size_t nseries) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  const double w = PLOT_WIDTH - PLOT_LEFT - PLOT_RIGHT, h = PLOT_PANEL_HEIGHT;
  double t0 = r->samples[0].t, t1 = t0, ymax = 0;
  for (size_t i = 1; i < r->n; i++) {
    if (r->samples[i].t < t0) t0 = r->samples[i].t;
    if (r->samples[i].t > t1) t1 = r->samples[i].t;
  }
  if (t1 <= t0) t1 = t0 + 1;
  for (size_t k = 0; k < nseries; k++)
    for (size_t i = 0; i < r->n; i++)
      if (series[k].y[i] > ymax) ymax = series[k].y[i];
  size_t unit = 0;
  while (unit + 1 < sizeof units / sizeof units[0] && ymax >= 1024 * pow(1024, (double)unit))
    unit++;
  double scale = pow(1024, (double)unit), ystep = tick_step(ymax > 0 ? ymax / scale : 1);
  double ytop = ceil((ymax > 0 ? ymax / scale : 1) / ystep) * ystep;
  double tstep = tick_step(t1 - t0);

  fprintf(o, "<g class=\"panel\">\n<text x=\"%d\" y=\"%.1f\" font-size=\"15\">", PLOT_LEFT,
          top - 12);
  put_escaped(o, title);
  fputs("</text>\n", o);
  fprintf(o,
          "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#444\"/>\n",
          PLOT_LEFT, top, w, h);
  for (int i = 0; i * ystep <= ytop + ystep / 2; i++) {
    double v = i * ystep, y = top + h - v / ytop * h;
    fprintf(o,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n",
            PLOT_LEFT, y, PLOT_LEFT + w, y, PLOT_LEFT - 6, y + 4, v);
  }
  for (double first = ceil(t0 / tstep), i = first; i * tstep <= t1 + tstep / 1e6; i++) {
    double v = i * tstep, x = PLOT_LEFT + (v - t0) / (t1 - t0) * w;
    fprintf(o,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
            x, top, x, top + h, x, top + h + 16, v);
  }
  fprintf(o,
          "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
          "text-anchor=\"middle\">time (s)</text>\n",
          PLOT_LEFT + w / 2, top + h + 34);
  fprintf(o,
          "<text class=\"axis\" x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
          "transform=\"rotate(-90 %d %.1f)\">bytes (%s)</text>\n",
          24, top + h / 2, 24, top + h / 2, units[unit]);
  for (size_t k = 0; k < nseries; k++) {
    fprintf(o, "<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
            series[k].id, series[k].color);
    for (size_t i = 0; i < r->n; i++)
      fprintf(o, "%s%.1f,%.1f", i ? " " : "", PLOT_LEFT + (r->samples[i].t - t0) / (t1 - t0) * w,
              top + h - series[k].y[i] / scale / ytop * h);
    fputs("\"/>\n", o);
    double ly = top + 14 + 20 * (double)k, lx = PLOT_LEFT + w + 16;
    fprintf(o,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"3\"/><text class=\"legend\" x=\"%.1f\" y=\"%.1f\" "
            "font-size=\"12\">",
            lx, ly, lx + 24, ly, series[k].color, lx + 30, ly + 4);
    put_escaped(o, series[k].label);
    fputs("</text>\n", o);
  }
  fputs("</g>\n", o);
}

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

static int draw(FILE *o, const char *path, const record_t *r) {
  series_t heap[4] = {
      {"rss", "RSS", palette[0], NULL},
      {"live", "live (in use)", palette[1], NULL},
      {"cached", "cached (free, kept)", palette[2], NULL},
      {"mapped", "mapped", palette[3], NULL},
  };
  size_t offsets[4] = {offsetof(sample_t, rss), offsetof(sample_t, live),
                       offsetof(sample_t, cached), offsetof(sample_t, mapped)};
  class_total_t busiest[PLOT_CLASSES];
  size_t nbusy = busiest_classes(r, busiest, PLOT_CLASSES);
  series_t classes[PLOT_CLASSES];
  char ids[PLOT_CLASSES][32], labels[PLOT_CLASSES][64];
  double *values = calloc((4 + nbusy) * r->n, sizeof(double));
  if (!values) {
    error("out of memory");
    return -1;
  }
  for (size_t k = 0; k < 4; k++) {
    heap[k].y = values + k * r->n;
    for (size_t i = 0; i < r->n; i++)
      heap[k].y[i] = (double)*(const uint64_t *)((const char *)&r->samples[i] + offsets[k]);
  }
  for (size_t k = 0; k < nbusy; k++) {
    snprintf(ids[k], sizeof ids[k], "class-%llu", (unsigned long long)busiest[k].size);
    snprintf(labels[k], sizeof labels[k], "%llu B: %llu allocs",
             (unsigned long long)busiest[k].size, (unsigned long long)busiest[k].allocs);
    classes[k] = (series_t){ids[k], labels[k], palette[k], values + (4 + k) * r->n};
    for (size_t i = 0; i < r->n; i++) {
      const sample_t *x = &r->samples[i];
      for (size_t j = 0; j < x->nclasses; j++)
        if (r->classes[x->first_class + j].size == busiest[k].size)
          classes[k].y[i] = (double)r->classes[x->first_class + j].live;
    }
  }
  int height = PLOT_TOP + 2 * PLOT_PANEL_HEIGHT + PLOT_GAP + PLOT_BOTTOM;
  fprintf(o,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<title>",
          PLOT_WIDTH, height, PLOT_WIDTH, height);
  put_escaped(o, path);
  fputs("</title>\n", o);
  char title[128];
  snprintf(title, sizeof title, "Heap over time (%zu samples, %.3g s)", r->n,
           r->samples[r->n - 1].t - r->samples[0].t);
  draw_panel(o, PLOT_TOP, title, r, heap, 4);
  draw_panel(o, PLOT_TOP + PLOT_PANEL_HEIGHT + PLOT_GAP,
             nbusy ? "Live bytes of the busiest size classes (most allocations)"
                   : "Live bytes of the busiest size classes (the record has none)",
             r, classes, nbusy);
  fputs("</svg>\n", o);
  free(values);
  return 0;
}

/* OUT.svg from FILE: FILE less a ".jsonl" or ".json" ending, then ".svg". */
static char *default_output(const char *path) {
  size_t len = strlen(path);
  char *out = malloc(len + 5);
  if (!out) return NULL;
  memcpy(out, path, len + 1);
  if (len > 6 && strcmp(out + len - 6, ".jsonl") == 0)
    out[len - 6] = '\0';
  else if (len > 5 && strcmp(out + len - 5, ".json") == 0)
    out[len - 5] = '\0';
  strcat(out, ".svg");
  return out;
}

int plot_record(const char *path, const char *out_path) {
  record_t r;
  memset(&r, 0, sizeof r);
  char *made = out_path ? NULL : default_output(path);
  const char *target = out_path ? out_path : made;
  int rc = target ? read_record(path, &r) : -1;
  if (!target) error("out of memory");
  if (rc == 0) {
    FILE *o = fopen(target, "w");
    if (!o) {
      error("cannot write %s: %s", target, strerror(errno));
      rc = -1;
    } else {
      rc = draw(o, path, &r);
      if (fclose(o) != 0 && rc == 0) {
        error("cannot write %s: %s", target, strerror(errno));
        rc = -1;
      }
      if (rc == 0) printf("%s\n", target);
    }
  }
  free(made);
  free(r.samples);
  free(r.classes);
  return rc;
}
