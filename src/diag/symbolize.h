/* symbolize: return addresses -> function and object lines of a report. See symbolize.c. */
#ifndef MAGPIE_SYMBOLIZE_H
#define MAGPIE_SYMBOLIZE_H

#include "report_buf.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One line per frame ("    #i 0xip in name+0xoff (object)"), C++ names demangled;
   "    (no frames)" when n is 0. */
void report_frames(report_buf_t *b, const uintptr_t *ips, int n);

/* The last object file mapped for symbolising, kept while consecutive lookups share it:
   zero-initialised before the first, closed by symbolize_end. */
typedef struct symfile {
  char path[256];
  void *map;
  size_t size;
} symfile_t;
/* The function holding return address ip, demangled, into name (cap bytes, at least 64; cut
   short rather than overflow), and in *path the object it lies in (NULL when none). False when
   no symbol table names it: then name is "[object+0xoffset]" where an object holds ip, else
   untouched. Allocates nothing (the heap profile's writer). */
bool symbolize_ip(symfile_t *f, uintptr_t ip, char *name, size_t cap, const char **path);
void symbolize_end(symfile_t *f);

/* The loaded object that holds address addr, from the program headers (dl_iterate_phdr): the
   span of its PT_LOAD segments, [lo, hi), its load bias and its path ("" for the program). */
typedef struct symbolize_object {
  uintptr_t lo, hi, bias;
  const char *path;
} symbolize_object_t;
bool symbolize_object_of(uintptr_t addr, symbolize_object_t *o);

#ifdef __cplusplus
}
#endif

#endif
