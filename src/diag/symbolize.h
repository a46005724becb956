/* symbolize: return addresses -> function and object lines of a report. See symbolize.c. */
#ifndef MAGPIE_SYMBOLIZE_H
#define MAGPIE_SYMBOLIZE_H

#include "report_buf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One line per frame ("    #i 0xip in name+0xoff (object)"), C++ names demangled;
   "    (no frames)" when n is 0. */
void report_frames(report_buf_t *b, const uintptr_t *ips, int n);

#ifdef __cplusplus
}
#endif

#endif
