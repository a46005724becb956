/* report: how magpie tells the user something went wrong. See report.c. */
#ifndef MAGPIE_REPORT_H
#define MAGPIE_REPORT_H

#include <stddef.h>

/* A program error on a heap block: prints kind, address, detail and the caller's stack, aborts. */
__attribute__((noreturn, cold)) void report_heap_error(const char *kind, const void *addr,
                                                       const char *detail);
/* magpie itself cannot go on (the kernel refused, an internal invariant broke). */
__attribute__((noreturn, cold)) void report_fatal(const char *what, const void *addr, size_t value);
/* One line on stderr: "magpie: <what><name>\n". */
void report_warning(const char *what, const char *name);

#endif
