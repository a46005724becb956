/* folded: reading folded stacks ("outer;...;inner VALUE" a line), the text form of the heap
 * profile the library writes beside its pprof file (PATH.inuse.folded, PATH.alloc.folded). */
#ifndef MAGPIE_TOOL_FOLDED_H
#define MAGPIE_TOOL_FOLDED_H

#include <stddef.h>

typedef struct {
  char *stack; /* frames, outermost first, separated by ';' */
  double value;
} folded_line_t;

typedef struct {
  folded_line_t *lines;
  size_t n;
} folded_t;

/* Reads path; a pprof file (gzip) stands for its live-heap stacks, path.inuse.folded. Returns
 * 0, or -1 after reporting why. Lines that do not parse are skipped. */
int folded_read(const char *path, folded_t *out);
void folded_free(folded_t *f);

#endif
