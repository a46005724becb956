/* top: `magpie top PID`, a live view of a running process's heap: its memory figures and
 * totals, the busiest caches and the most contended locks, with rates per second taken from
 * successive snapshots of its statistics area (live.h). Interactive on a terminal (ANSI
 * escapes, keys change the sort); with --batch, or when stdout is not a terminal, plain text
 * frames one after another, like top -b. */
#ifndef MAGPIE_TOOL_TOP_H
#define MAGPIE_TOOL_TOP_H

#include <sys/types.h>

typedef struct {
  pid_t pid;
  unsigned interval_ms; /* between refreshes */
  long batch;           /* frames to print as plain text; 0: interactive, or endless plain text
                           when stdout is not a terminal */
  char class_key;       /* the class table's sort key (top_sort_key_ok), 0 for the default */
  char lock_key;        /* the lock table's */
} top_options_t;

/* Whether key is one of the class table's sort keys (class != 0) or the lock table's. */
int top_sort_key_ok(char key, int class);
/* Runs the view until 'q', SIGINT, SIGTERM or SIGHUP (returns 0), the frames of --batch are
 * printed (0), the process exits (1) or has no readable area (EXIT_TOOL_FAILED); says why on
 * stderr when it is not 0. */
int top_run(const top_options_t *o);

#endif
