/*
 * rusage: run a command and write its wall time and resource usage to a file.
 *
 *   bench_rusage OUTFILE COMMAND [ARGS...]
 *
 * bench/run.py starts every measured program through this helper. Measuring from the runner
 * directly would be wrong: Linux carries a process's peak-RSS mark across exec (the new program
 * starts with the high-water mark of the process image it replaced), so every child of a Python
 * runner would show a peak RSS of at least the runner's own (tens of MiB). This helper is small;
 * the command it forks inherits its small mark instead. Peak RSS covers the command and every
 * descendant it waited for (the largest of them), as ru_maxrss of wait4 does.
 *
 * The helper itself should not run under the allocator being measured: run.py passes the library
 * in BENCH_CHILD_PRELOAD, and the helper sets LD_PRELOAD from it in the command's process only.
 *
 * OUTFILE gets one line: "status=S wall=SECONDS utime=SECONDS stime=SECONDS maxrss_kib=K",
 * where S is the exit status, or -N when the command was killed by signal N. The helper exits
 * with the command's status (128 + N for a signal, 127 when it cannot be started).
 *
 * With BENCH_TIMEOUT_S=SECONDS in its environment the command runs in a process group of its own
 * and the helper kills that group once the command has run that long, and adds " timeout=1" to
 * the line: the device bundle's runner (bench/bundle-run.sh) has no other timeout where
 * coreutils may be absent.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t child_pid;        /* the command's process (and group) id */
static volatile sig_atomic_t timed_out; /* 1 once the alarm killed it */

static void on_alarm(int sig) {
  (void)sig;
  timed_out = 1;
  kill(-child_pid, SIGKILL);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_rusage OUTFILE COMMAND [ARGS...]\n");
    return 2;
  }
  FILE *out = fopen(argv[1], "w");
  if (out == NULL) {
    fprintf(stderr, "bench_rusage: cannot write %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  const char *limit_text = getenv("BENCH_TIMEOUT_S");
  int limit = limit_text != NULL ? atoi(limit_text) : 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "bench_rusage: fork: %s\n", strerror(errno));
    return 2;
  }
  if (pid == 0) {
    if (limit > 0) setpgid(0, 0); /* else it stays in ours, which run.py kills on its timeout */
    const char *preload = getenv("BENCH_CHILD_PRELOAD");
    if (preload != NULL && preload[0] != '\0') setenv("LD_PRELOAD", preload, 1);
    unsetenv("BENCH_CHILD_PRELOAD");
    execvp(argv[2], argv + 2);
    fprintf(stderr, "bench_rusage: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  child_pid = pid;
  if (limit > 0) {
    setpgid(pid, pid); /* as the child does: whichever runs first */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm((unsigned)limit);
  }
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "bench_rusage: wait4: %s\n", strerror(errno));
      return 2;
    }
  alarm(0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  fprintf(out, "status=%d wall=%.6f utime=%.6f stime=%.6f maxrss_kib=%ld%s\n", code,
          (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
          (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
          (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6, ru.ru_maxrss,
          timed_out ? " timeout=1" : "");
  fclose(out);
  return code >= 0 ? code : 128 - code;
}
