/* stats: the statistics one process running the library wrote at exit (MAGPIE_OPTIONS
 * stats=json), read from its file into a stats_t. Only the keys listed here are kept; any other
 * key is skipped, so a library that writes more keys still works with this tool. */
#ifndef MAGPIE_TOOL_STATS_H
#define MAGPIE_TOOL_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t index;  /* "class": the size class number */
  uint64_t size;   /* "size": the largest request it serves, in bytes */
  uint64_t allocs; /* "allocs" */
  uint64_t frees;  /* "frees" */
} class_stat_t;

/* Bits of stats_t.seen: which top-level keys the file held. */
enum {
  SEEN_VERSION = 1 << 0,
  SEEN_ALLOCS = 1 << 1,
  SEEN_FREES = 1 << 2,
  SEEN_REQUESTED = 1 << 3,
  SEEN_LIVE = 1 << 4,
  SEEN_PEAK_LIVE = 1 << 5,
  SEEN_MAPPED = 1 << 6,
  SEEN_PEAK_MAPPED = 1 << 7,
  SEEN_CLASSES = 1 << 8,
  SEEN_LARGE = 1 << 9,
  SEEN_PID = 1 << 10,
  SEEN_HUGEPAGES = 1 << 11,
};

typedef struct {
  unsigned seen; /* SEEN_* bits */
  uint64_t version, pid, allocs, frees, bytes_requested, live_bytes, peak_live_bytes;
  uint64_t mapped_bytes, peak_mapped_bytes, large_allocs, large_frees;
  /* "hugepages": the option as used, the kernel's THP mode, heap bytes on huge pages, bytes in
     slab huge pages, collapses and subreleases */
  char hp_mode[16], hp_thp[16];
  uint64_t hp_huge_bytes, hp_slab_bytes, hp_collapses, hp_subreleases;
  class_stat_t *classes; /* "classes", in file order; malloc'd */
  size_t nclasses, cap;
  size_t nmembers; /* members of the top-level object */
  size_t close;    /* offset of the top-level object's '}' */
} stats_t;

/* Reads a whole stats file into a malloc'd, NUL-terminated buffer; returns NULL with errno set. */
char *stats_read_file(const char *path, size_t *len);
/* Parses the text of a stats file into st; on failure returns -1 with *why and *where set
 * (*where is SIZE_MAX when the text is valid JSON but not a magpie stats file). */
int stats_parse(const char *text, size_t len, stats_t *st, const char **why, size_t *where);

#endif
