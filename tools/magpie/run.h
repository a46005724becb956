/* run: starting the program with the library preloaded, waiting for it, and what came of it. */
#ifndef MAGPIE_TOOL_RUN_H
#define MAGPIE_TOOL_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  const char *program; /* argv[0] of the program, for messages */
  int stats_json;      /* the library writes its statistics as JSON, else as text */
  pid_t pid;           /* the program's pid */
  int wait_status;     /* from wait4; meaningless when exec_errno != 0 */
  int exec_errno;      /* why exec failed, or 0 */
  int exit_status;     /* what the tool exits with */
  uint64_t peak_rss;   /* bytes, from ru_maxrss */
  size_t children;     /* other stats files: the program's children */
  const char *profile; /* the heap profile's path (absolute) to ask for at exit, or NULL */
} run_result_t;

/* What to do while the program runs (--record): options for the library, appended to
 * MAGPIE_OPTIONS, and a call every interval_ms until the program ends. */
typedef struct {
  const char *options;
  unsigned interval_ms;
  void (*tick)(void *ctx, pid_t pid);
  void *ctx;
} run_watch_t;

/* Finds LIBRARY_NAME beside this executable; returns 0, or -1 after reporting why. */
int find_library(char *lib, size_t cap);
/* Runs argv with lib preloaded and, when stats_dir is not NULL, the library told to write its
 * statistics there (and its heap profile to r->profile when set); fills r (r->program,
 * r->profile and r->stats_json set by the caller); returns 0, or -1 when the tool itself
 * failed. */
int run_program(char **argv, const char *lib, const char *stats_dir, const run_watch_t *watch,
                run_result_t *r);

#endif
