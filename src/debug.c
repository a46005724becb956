/* PLACEHOLDER while debug mode is written: MAGPIE_DEBUG is refused with a warning. */
#include "debug.h"
#include "cache.h"
#include "report.h"
#include "sizeclass.h"
#include "slab.h"

bool debug_on;

void debug_init(const char *flags) {
  report_warning("MAGPIE_DEBUG is not available yet: ", flags);
}

void *debug_alloc(size_t size, size_t align, int kind, bool zero) {
  (void)size, (void)align, (void)kind, (void)zero;
  report_fatal("debug mode is off", NULL, 0);
}

void debug_free(void *p, size_t size, size_t align, int kind) {
  (void)size, (void)align, (void)kind;
  report_fatal("debug mode is off", p, 0);
}

void *debug_realloc(void *p, size_t size) {
  report_fatal("debug mode is off", p, size);
}
size_t debug_usable_size(void *p) {
  report_fatal("debug mode is off", p, 0);
}
void debug_at_exit(void) {}

MAGPIE_EXPORT int magpie_verify(void) {
  for (unsigned c = 1; c <= SC_COUNT; c++)
    slab_check(&malloc_caches[c]);
  vmem_check(&heap_arena);
  return 0;
}
