/* folded: see folded.h. A line's value is the number after its last space, so frame names may
 * hold spaces (C++ signatures); a gzip file is taken for the pprof file the library wrote, whose
 * folded live-heap stacks lie beside it. */
#define _GNU_SOURCE
#include "folded.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

static int is_gzip(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  int a = fgetc(f), b = fgetc(f);
  fclose(f);
  return a == 0x1f && b == 0x8b;
}

int folded_read(const char *path, folded_t *out) {
  char *alt = NULL;
  if (is_gzip(path)) {
    if (asprintf(&alt, "%s.inuse.folded", path) < 0) return -1;
    path = alt;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    error("cannot read %s: %s", path, strerror(errno));
    free(alt);
    return -1;
  }
  size_t cap = 0;
  out->lines = NULL;
  out->n = 0;
  char *line = NULL;
  size_t len = 0;
  while (getline(&line, &len, f) > 0) {
    line[strcspn(line, "\n")] = '\0';
    char *space = strrchr(line, ' '), *end;
    if (!space || space == line) continue;
    double v = strtod(space + 1, &end);
    if (end == space + 1 || *end) continue;
    if (out->n == cap) {
      cap = cap ? 2 * cap : 256;
      folded_line_t *grown = realloc(out->lines, cap * sizeof *grown);
      if (!grown) break;
      out->lines = grown;
    }
    *space = '\0';
    out->lines[out->n].stack = strdup(line);
    out->lines[out->n].value = v;
    if (out->lines[out->n].stack) out->n++;
  }
  free(line);
  fclose(f);
  free(alt);
  return 0;
}

void folded_free(folded_t *f) {
  for (size_t i = 0; i < f->n; i++)
    free(f->lines[i].stack);
  free(f->lines);
  f->lines = NULL;
  f->n = 0;
}
