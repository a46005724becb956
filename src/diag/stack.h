/* stack: the calling code's return addresses, kept or reported. See stack.c. */
#ifndef MAGPIE_STACK_H
#define MAGPIE_STACK_H

#include "report_buf.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REPORT_DEPTH_MAX 64 /* frames a captured stack may hold */

/* The calling code's return addresses, magpie's own leading frames left out; returns how many
   (at most max). Allocates nothing and takes no magpie lock. */
int report_capture(uintptr_t *ips, int max);
/* "  stack of the call:" and the calling code's frames, symbolised (report_frames). */
void report_current_stack(report_buf_t *b);

#ifdef __cplusplus
}
#endif

#endif
