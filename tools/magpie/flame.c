/* flame: a flame graph (after Brendan Gregg's) of folded stacks, drawn as SVG.
 * 1. The stacks merge into a tree: a node per frame reached by one path from the root, its
 *    weight the sum of the lines through it. Children are ordered by name, so two graphs of
 *    one program line up; the order of the lines does not matter.
 * 2. Layout: the root ("all") spans the whole width at the bottom; a node's children sit on top
 *    of it, side by side, each as wide as its share of the weight. Nodes narrower than
 *    FLAME_MIN_PX are left out (with their children). Each rectangle carries a <title> (name,
 *    bytes, share), which viewers show on hover, and its name when it fits.
 * 3. Colours are warm, picked from a hash of the name, so a function keeps its colour. */
#define _GNU_SOURCE
#include "flame.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "folded.h"
#include "report.h"
#include "tool.h"

#define FLAME_WIDTH 1200.0
#define FLAME_PAD 10.0
#define FLAME_ROW 16.0
#define FLAME_TOP 40.0    /* the title's band */
#define FLAME_CHAR_PX 7.0 /* width of one character at the 12 px font */
#define FLAME_MIN_PX 0.1

typedef struct node {
  char *name;
  double value;
  struct node **kids;
  size_t nkids, cap;
} node_t;

static node_t *node_child(node_t *n, const char *name, size_t len) {
  for (size_t i = 0; i < n->nkids; i++)
    if (strlen(n->kids[i]->name) == len && memcmp(n->kids[i]->name, name, len) == 0)
      return n->kids[i];
  if (n->nkids == n->cap) {
    size_t cap = n->cap ? 2 * n->cap : 4;
    node_t **grown = realloc(n->kids, cap * sizeof *grown);
    if (!grown) return NULL;
    n->kids = grown;
    n->cap = cap;
  }
  node_t *k = calloc(1, sizeof *k);
  if (!k || !(k->name = strndup(name, len))) {
    free(k);
    return NULL;
  }
  return n->kids[n->nkids++] = k;
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(node_t *const *)a)->name, (*(node_t *const *)b)->name);
}

static void node_free(node_t *n) {
  for (size_t i = 0; i < n->nkids; i++)
    node_free(n->kids[i]);
  free(n->kids);
  free(n->name);
  free(n);
}

static size_t node_depth(const node_t *n) {
  size_t d = 0;
  for (size_t i = 0; i < n->nkids; i++) {
    size_t k = node_depth(n->kids[i]);
    if (k > d) d = k;
  }
  return d + 1;
}

static void xml_text(FILE *out, const char *s, size_t max) {
  for (size_t i = 0; s[i] && i < max; i++) {
    switch (s[i]) {
    case '&':
      fputs("&amp;", out);
      break;
    case '<':
      fputs("&lt;", out);
      break;
    case '>':
      fputs("&gt;", out);
      break;
    case '"':
      fputs("&quot;", out);
      break;
    default:
      fputc(s[i], out);
    }
  }
}

static void draw(FILE *out, node_t *n, double x, size_t depth, double px_per_unit, double total,
                 double height) {
  double w = n->value * px_per_unit;
  if (w < FLAME_MIN_PX) return;
  double y = height - FLAME_PAD - (double)(depth + 1) * FLAME_ROW;
  uint32_t h = 2166136261u;
  for (const char *c = n->name; *c; c++)
    h = (h ^ (unsigned char)*c) * 16777619u;
  char bytes[32];
  fputs("<g><title>", out);
  xml_text(out, n->name, SIZE_MAX);
  fprintf(out, " (%s, %.2f%%)</title>", fmt_bytes((uint64_t)n->value, bytes, sizeof bytes),
          total > 0 ? 100.0 * n->value / total : 0.0);
  fprintf(out,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
          "fill=\"rgb(%u,%u,%u)\" rx=\"2\"/>",
          x, y, w, FLAME_ROW - 1, 205 + h % 50, 80 + (h >> 8) % 140, 30 + (h >> 16) % 50);
  size_t fit = w > 3 * FLAME_CHAR_PX ? (size_t)((w - 6) / FLAME_CHAR_PX) : 0;
  if (fit) {
    size_t len = strlen(n->name);
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 3, y + FLAME_ROW - 4.5);
    xml_text(out, n->name, len > fit ? fit - 2 : len);
    fputs(len > fit ? "..</text>" : "</text>", out);
  }
  fputs("</g>\n", out);
  qsort(n->kids, n->nkids, sizeof *n->kids, by_name);
  for (size_t i = 0; i < n->nkids; i++) {
    draw(out, n->kids[i], x, depth + 1, px_per_unit, total, height);
    x += n->kids[i]->value * px_per_unit;
  }
}

int cmd_flame(int argc, char **argv) {
  const char *in = NULL, *outpath = NULL, *title = "Heap profile";
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      outpath = argv[++i];
    } else if (strcmp(argv[i], "--title") == 0 && i + 1 < argc) {
      title = argv[++i];
    } else if (argv[i][0] == '-' || in) {
      error("unexpected argument '%s' for flame\nTry 'magpie --help' for usage.", argv[i]);
      return EXIT_USAGE;
    } else {
      in = argv[i];
    }
  }
  if (!in) {
    error("flame: give FILE (folded stacks)\nTry 'magpie --help' for usage.");
    return EXIT_USAGE;
  }
  folded_t f;
  if (folded_read(in, &f) < 0) return EXIT_TOOL_FAILED;
  node_t *root = calloc(1, sizeof *root);
  if (!root || !(root->name = strdup("all"))) {
    error("out of memory");
    return EXIT_TOOL_FAILED;
  }
  for (size_t i = 0; i < f.n; i++) {
    if (f.lines[i].value <= 0) continue;
    node_t *n = root;
    root->value += f.lines[i].value;
    for (const char *s = f.lines[i].stack; n && *s;) {
      size_t len = strcspn(s, ";");
      if ((n = node_child(n, s, len))) n->value += f.lines[i].value;
      s += len + (s[len] == ';');
    }
  }
  folded_free(&f);
  char *defpath = NULL;
  if (!outpath && asprintf(&defpath, "%s.svg", in) >= 0) outpath = defpath;
  FILE *out = outpath ? fopen(outpath, "w") : NULL;
  if (!out) {
    error("cannot write %s: %s", outpath ? outpath : in, strerror(errno));
    node_free(root);
    free(defpath);
    return EXIT_TOOL_FAILED;
  }
  double height = FLAME_TOP + FLAME_PAD + (double)node_depth(root) * FLAME_ROW + FLAME_PAD;
  fprintf(out,
          "<?xml version=\"1.0\" standalone=\"no\"?>\n"
          "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
          "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"#f8f4ec\"/>\n"
          "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">",
          FLAME_WIDTH, height, FLAME_WIDTH, height, FLAME_WIDTH / 2);
  xml_text(out, title, SIZE_MAX);
  char total[32];
  fprintf(out, " (%s)</text>\n", fmt_bytes((uint64_t)root->value, total, sizeof total));
  if (root->value > 0)
    draw(out, root, FLAME_PAD, 0, (FLAME_WIDTH - 2 * FLAME_PAD) / root->value, root->value, height);
  fputs("</svg>\n", out);
  int failed = fclose(out) != 0;
  if (failed)
    error("cannot write %s", outpath);
  else
    printf("%s\n", outpath);
  node_free(root);
  free(defpath);
  return failed ? EXIT_TOOL_FAILED : 0;
}
