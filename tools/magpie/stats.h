/* stats: the statistics one process running the library wrote at exit (MAGPIE_OPTIONS
 * stats=json), read from its file and checked: stats_t says where the tool's own keys go. Every
 * key is skipped but the version, so a library that writes more keys still works with this
 * tool. */
#ifndef MAGPIE_TOOL_STATS_H
#define MAGPIE_TOOL_STATS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  bool magpie;     /* the object has the "magpie" version key */
  size_t nmembers; /* members of the top-level object */
  size_t close;    /* offset of the top-level object's '}' */
} stats_t;

/* Reads a whole stats file into a malloc'd, NUL-terminated buffer; returns NULL with errno set. */
char *stats_read_file(const char *path, size_t *len);
/* Parses the text of a stats file into st; on failure returns -1 with *why and *where set
 * (*where is SIZE_MAX when the text is valid JSON but not a magpie stats file). */
int stats_parse(const char *text, size_t len, stats_t *st, const char **why, size_t *where);

#endif
