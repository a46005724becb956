/* run: running the program under the library.
 * 1. Finding the library. In the build directory it sits beside this executable; installed, it
 *    is in the library directory, MAGPIE_LIBDIR_FROM_BINDIR away from the executable's (e.g.
 *    ../lib/x86_64-linux-gnu), which holds under any prefix and under DESTDIR. /proc/self/exe
 *    gives the real path of this program, symlinks resolved; the library path is the first of
 *    those directories, canonical, that holds LIBRARY_NAME. It is put in front of any LD_PRELOAD
 *    the user already set, so it interposes before the other preloads.
 * 2. Asking for statistics. With a stats directory the tool appends
 *    "stats=json,stats_file=DIR/stats.%p" after the user's own MAGPIE_OPTIONS; the library keeps
 *    the last value of an option, so the tool's settings win. A heap profile is asked for the
 *    same way: "profile_file=PATH".
 * 3. Running. fork, then execvp in the child. The child reports an exec failure to the parent
 *    through a close-on-exec pipe (one errno value; end of file means exec succeeded), so "not
 *    found" is told apart from a program that itself exits 127. While the program runs the tool
 *    ignores SIGINT and SIGQUIT (the terminal sends them to the program too, and the tool must
 *    outlive it to report) and forwards SIGTERM and SIGHUP sent to the tool alone. */
#define _GNU_SOURCE
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tmpdir.h"
#include "tool.h"

static volatile sig_atomic_t child_pid; /* the program, for the forwarding handler */

static void forward_signal(int sig) {
  if (child_pid > 0) kill((pid_t)child_pid, sig);
}

/* Sets lib to DIR/LIBRARY_NAME, DIR canonical; 0 when that file is readable. */
static int library_in(const char *dir, char *lib, size_t cap) {
  char real[PATH_MAX];
  if (!realpath(dir, real)) return -1;
  if ((size_t)snprintf(lib, cap, "%s/%s", real, LIBRARY_NAME) >= cap) return -1;
  return access(lib, R_OK);
}

int find_library(char *lib, size_t cap) {
  char exe[PATH_MAX], installed[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) {
    error("cannot find this executable through /proc/self/exe: %s", strerror(errno));
    return -1;
  }
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  bool fits = (size_t)snprintf(installed, sizeof installed, "%s/%s", exe,
                               MAGPIE_LIBDIR_FROM_BINDIR) < sizeof installed;
  if (library_in(exe, lib, cap) < 0 && (!fits || library_in(installed, lib, cap) < 0)) {
    error("cannot find the allocator library %s beside the magpie executable (%s) nor in %s",
          LIBRARY_NAME, exe, installed);
    return -1;
  }
  /* ld.so splits LD_PRELOAD at spaces and colons. */
  if (strpbrk(lib, " :")) {
    error("the path %s holds a space or ':', which LD_PRELOAD cannot carry", lib);
    return -1;
  }
  return 0;
}

/* Sets name to value, or to value SEP old when name is already set and not empty; the first
 * argument order puts ours first (LD_PRELOAD), the second last (MAGPIE_OPTIONS). */
static int join_env(const char *name, const char *value, char sep, int ours_first) {
  const char *old = getenv(name);
  if (!old || !*old) return setenv(name, value, 1);
  size_t n = strlen(old) + strlen(value) + 2;
  char *joined = malloc(n);
  if (!joined) return -1;
  if (ours_first)
    snprintf(joined, n, "%s%c%s", value, sep, old);
  else
    snprintf(joined, n, "%s%c%s", old, sep, value);
  int rc = setenv(name, joined, 1);
  free(joined);
  return rc;
}

/* The child: set up the environment, exec, and report an exec failure on fd. */
static void run_child(char **argv, const char *lib, const char *stats_dir, const char *profile,
                      int stats_json, const run_watch_t *watch, const sigset_t *mask, int fd) {
  int err = 0;
  sigprocmask(SIG_SETMASK, mask, NULL);
  if (join_env("LD_PRELOAD", lib, ':', 1) < 0) err = errno;
  if (!err && stats_dir) {
    char opts[PATH_MAX + 64];
    snprintf(opts, sizeof opts, "stats=%s,stats_file=%s/" STATS_PREFIX "%%p",
             stats_json ? "json" : "text", stats_dir);
    if (join_env("MAGPIE_OPTIONS", opts, ',', 0) < 0) err = errno;
  }
  if (!err && profile) {
    char opts[PATH_MAX + 32];
    snprintf(opts, sizeof opts, "profile_file=%s", profile);
    if (join_env("MAGPIE_OPTIONS", opts, ',', 0) < 0) err = errno;
  }
  if (!err && watch && join_env("MAGPIE_OPTIONS", watch->options, ',', 0) < 0) err = errno;
  if (!err) {
    execvp(argv[0], argv);
    err = errno;
  }
  while (write(fd, &err, sizeof err) < 0 && errno == EINTR) {
  }
  _exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

/* wait4 for pid, calling the watch's tick every interval while it runs. */
static pid_t run_wait(pid_t pid, int *status, struct rusage *ru, const run_watch_t *watch) {
  if (!watch) return wait4(pid, status, 0, ru);
  for (;;) {
    pid_t got = wait4(pid, status, WNOHANG, ru);
    if (got != 0) return got;
    struct timespec ts = {(time_t)(watch->interval_ms / 1000),
                          (long)(watch->interval_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    watch->tick(watch->ctx, pid);
  }
}

int run_program(char **argv, const char *lib, const char *stats_dir, const run_watch_t *watch,
                run_result_t *r) {
  int pipefd[2];
  sigset_t forwarded, old_mask;
  struct sigaction ign = {0}, fwd = {0}, old_int, old_quit;

  if (pipe2(pipefd, O_CLOEXEC) < 0) {
    error("pipe: %s", strerror(errno));
    return -1;
  }
  sigemptyset(&forwarded);
  sigaddset(&forwarded, SIGTERM);
  sigaddset(&forwarded, SIGHUP);
  sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    error("fork: %s", strerror(errno));
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    close(pipefd[0]);
    close(pipefd[1]);
    return -1;
  }
  if (pid == 0) {
    close(pipefd[0]);
    run_child(argv, lib, stats_dir, r->profile, r->stats_json, watch, &old_mask, pipefd[1]);
  }
  close(pipefd[1]);
  r->pid = pid;
  child_pid = pid;
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  fwd.sa_handler = forward_signal;
  fwd.sa_flags = SA_RESTART;
  sigemptyset(&fwd.sa_mask);
  sigaction(SIGTERM, &fwd, NULL);
  sigaction(SIGHUP, &fwd, NULL);
  sigprocmask(SIG_SETMASK, &old_mask, NULL);

  int err = 0;
  ssize_t got;
  while ((got = read(pipefd[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  close(pipefd[0]);
  r->exec_errno = got == (ssize_t)sizeof err ? err : 0;

  struct rusage ru;
  int status = 0;
  while (run_wait(pid, &status, &ru, watch) < 0) {
    if (errno != EINTR) {
      error("waiting for %s: %s", r->program, strerror(errno));
      return -1;
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGQUIT, &old_quit, NULL);
  r->wait_status = status;
  r->peak_rss = (uint64_t)ru.ru_maxrss * 1024;
  if (r->exec_errno)
    r->exit_status = r->exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
  else if (WIFSIGNALED(status))
    r->exit_status = 128 + WTERMSIG(status);
  else
    r->exit_status = WEXITSTATUS(status);
  return 0;
}
