/*
 * A program in secure-execution mode (set-group-ID here) must not take MAGPIE_OPTIONS or
 * MAGPIE_DEBUG, which the user who runs it set: they name files the program would create with
 * its privileges (stats_file, log) and ask for reports of its heap (src/core/options.c
 * theory 4). secure_env.sh runs this program twice with both set: as it was built, where the
 * stats file and the leak report's log must appear, and as a set-group-ID copy, where neither
 * may.
 *
 *   corner_secure_env 0|1   1: the program must be in secure-execution mode (AT_SECURE), 0:
 *                           must not; exit status 77 where it is not what was asked (a
 *                           file system mounted nosuid).
 */
#include "check.h"

#include <sys/auxv.h>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  unsigned long want = (unsigned long)atoi(argv[1]), secure = getauxval(AT_SECURE);
  if (secure != want) {
    printf("SKIPPED: AT_SECURE is %lu where %lu was wanted (a nosuid file system?)\n", secure,
           want);
    return 77;
  }
  if (!api_magpie_loaded()) {
    fprintf(stderr, "secure_env: malloc is not magpie's\n");
    return 1;
  }
  /* a block no pointer reaches at exit: a leak report, when debug mode is on */
  void *volatile leaked = malloc(100);
  leaked = NULL;
  (void)leaked;
  return 0;
}
