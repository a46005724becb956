/* profile: taking a running process's heap profile, and comparing two.
 * 1. The request. The library polls for PROFILE_REQUEST_PREFIX<pid> at most once per reap (every
 *    reap_ms while the process allocates, or always once its heap passes 32 MiB and its reaper
 *    thread runs). It acts only on a regular file of its own user that no one else may write,
 *    reads the path in it, writes the profile there and removes the request. The tool creates
 *    the request exclusively (mode 0600), waits for it to go and checks the profile is there;
 *    on a timeout it withdraws the request. No signal is sent: the program sees nothing.
 * 2. The difference. Both profiles' live-heap stacks (folded) are matched by stack; the stacks
 *    whose live bytes grew most are printed first: where a leak grows between two snapshots. */
#define _GNU_SOURCE
#include "profile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "folded.h"
#include "report.h"
#include "tool.h"

#define PROFILE_TIMEOUT_S 10 /* the default wait for the process's next reap */
#define DIFF_TOP 10          /* stacks profile-diff prints by default */
#define DIFF_FRAMES 6        /* innermost frames it prints of each */

int profile_absolute(const char *path, char *out, size_t cap) {
  char cwd[PATH_MAX];
  if (path[0] == '/') {
    if ((size_t)snprintf(out, cap, "%s", path) >= cap) goto too_long;
    return 0;
  }
  if (!getcwd(cwd, sizeof cwd)) {
    error("cannot find the current directory: %s", strerror(errno));
    return -1;
  }
  if ((size_t)snprintf(out, cap, "%s/%s", cwd, path) >= cap) goto too_long;
  return 0;
too_long:
  error("path too long: %s", path);
  return -1;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* Parses the arguments "[FLAG N] A B" of command cmd, N (positive) into *value; returns the
 * index of A, or -1 after a usage error (operands names A and B). */
static int two_operands(int argc, char **argv, const char *cmd, const char *flag, long *value,
                        const char *operands) {
  int i = 0;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (strcmp(argv[i], flag) != 0 || i + 1 >= argc) {
      error("unknown option '%s' for %s\nTry 'magpie --help' for usage.", argv[i], cmd);
      return -1;
    }
    *value = strtol(argv[++i], NULL, 10);
  }
  if (argc - i != 2 || *value <= 0) {
    error("%s: give %s\nTry 'magpie --help' for usage.", cmd, operands);
    return -1;
  }
  return i;
}

int cmd_profile(int argc, char **argv) {
  long timeout = PROFILE_TIMEOUT_S;
  int i = two_operands(argc, argv, "profile", "--timeout", &timeout, "PID and FILE");
  if (i < 0) return EXIT_USAGE;
  char *end;
  long pid = strtol(argv[i], &end, 10);
  if (*end || pid <= 0) {
    error("profile: not a process id: %s", argv[i]);
    return EXIT_USAGE;
  }
  char file[PATH_MAX], request[64], line[PATH_MAX + 1];
  if (profile_absolute(argv[i + 1], file, sizeof file) < 0) return EXIT_TOOL_FAILED;
  if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
    error("no process %ld", pid);
    return EXIT_TOOL_FAILED;
  }
  snprintf(request, sizeof request, PROFILE_REQUEST_PREFIX "%ld", pid);
  unlink(file); /* its reappearance is the answer */
  int fd = open(request, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    error("cannot create the request %s: %s%s", request, strerror(errno),
          errno == EEXIST ? " (another request is pending; remove it if it is stale)" : "");
    return EXIT_TOOL_FAILED;
  }
  int n = snprintf(line, sizeof line, "%s\n", file);
  int ok = write(fd, line, (size_t)n) == n;
  close(fd);
  if (!ok) {
    error("cannot write the request %s", request);
    unlink(request);
    return EXIT_TOOL_FAILED;
  }
  for (long waited = 0; access(request, F_OK) == 0; waited += 20) {
    if (waited >= timeout * 1000) {
      unlink(request);
      error("process %ld did not answer within %ld s: it must run with magpie and profile_rate "
            "above 0, as the same user; it answers at its next reap (reap_ms), which comes while "
            "it allocates, or regularly once its heap passes 32 MiB",
            pid, timeout);
      return EXIT_TOOL_FAILED;
    }
    sleep_ms(20);
  }
  if (access(file, R_OK) < 0) {
    error("process %ld took the request but wrote no profile to %s (see its stderr)", pid, file);
    return EXIT_TOOL_FAILED;
  }
  printf("heap profile of process %ld: %s (pprof), %s.inuse.folded, %s.alloc.folded\n", pid, file,
         file, file);
  return 0;
}

typedef struct {
  const char *stack;
  double before, after;
} diff_row_t;

static int by_stack(const void *a, const void *b) {
  return strcmp(((const folded_line_t *)a)->stack, ((const folded_line_t *)b)->stack);
}

static int by_growth_desc(const void *a, const void *b) {
  const diff_row_t *x = a, *y = b;
  double gx = x->after - x->before, gy = y->after - y->before;
  return gx < gy ? 1 : gx > gy ? -1 : strcmp(x->stack, y->stack);
}

/* The innermost frames of a folded stack, innermost first: "f <- g <- h". */
static void print_stack(const char *stack) {
  const char *frames[DIFF_FRAMES];
  size_t lens[DIFF_FRAMES], n = 0;
  const char *end = stack + strlen(stack);
  while (end > stack && n < DIFF_FRAMES) {
    const char *start = end;
    while (start > stack && start[-1] != ';')
      start--;
    frames[n] = start;
    lens[n++] = (size_t)(end - start);
    end = start > stack ? start - 1 : stack;
  }
  for (size_t k = 0; k < n; k++)
    printf("%s%.*s", k ? " <- " : "", (int)lens[k], frames[k]);
  printf("%s\n", end > stack ? " <- ..." : "");
}

int cmd_profile_diff(int argc, char **argv) {
  long top = DIFF_TOP;
  int i = two_operands(argc, argv, "profile-diff", "-n", &top, "OLD and NEW");
  if (i < 0) return EXIT_USAGE;
  folded_t old, new;
  if (folded_read(argv[i], &old) < 0) return EXIT_TOOL_FAILED;
  if (folded_read(argv[i + 1], &new) < 0) {
    folded_free(&old);
    return EXIT_TOOL_FAILED;
  }
  qsort(old.lines, old.n, sizeof *old.lines, by_stack);
  qsort(new.lines, new.n, sizeof *new.lines, by_stack);
  diff_row_t *rows = calloc(old.n + new.n + 1, sizeof *rows);
  if (!rows) {
    error("out of memory");
    return EXIT_TOOL_FAILED;
  }
  size_t a = 0, b = 0, n = 0;
  double total_before = 0, total_after = 0;
  while (a < old.n || b < new.n) { /* a merge of the two sorted lists */
    int c = a == old.n ? 1 : b == new.n ? -1 : strcmp(old.lines[a].stack, new.lines[b].stack);
    diff_row_t *r = &rows[n++];
    r->stack = c <= 0 ? old.lines[a].stack : new.lines[b].stack;
    if (c <= 0) r->before = old.lines[a++].value;
    if (c >= 0) r->after = new.lines[b++].value;
    total_before += r->before;
    total_after += r->after;
  }
  qsort(rows, n, sizeof *rows, by_growth_desc);
  char x[32], y[32], z[32];
  printf("live bytes: %s -> %s\n", fmt_bytes((uint64_t)total_before, x, sizeof x),
         fmt_bytes((uint64_t)total_after, y, sizeof y));
  printf("%12s %12s %12s  stack (innermost first)\n", "growth", "old", "new");
  for (size_t k = 0; k < n && k < (size_t)top && rows[k].after > rows[k].before; k++) {
    printf("%12s %12s %12s  ", fmt_bytes((uint64_t)(rows[k].after - rows[k].before), x, sizeof x),
           fmt_bytes((uint64_t)rows[k].before, y, sizeof y),
           fmt_bytes((uint64_t)rows[k].after, z, sizeof z));
    print_stack(rows[k].stack);
  }
  free(rows);
  folded_free(&old);
  folded_free(&new);
  return 0;
}
