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
 *
 * With BENCH_COUNTERS=1 the line also gets the command's hardware counters, user space only,
 * over all its threads (perf_event_open, counting from its exec to its exit, counted, not
 * sampled): " cycles=N instructions=N l1d_misses=N llc_misses=N
 * branch_misses=N", and on Intel processors " clears_memory_ordering=N store_forward_blocks=N"
 * (the machine clears for memory ordering, and loads that could not take their data from an
 * earlier store: the stalls a load chain through just-written memory can cost). A count that
 * shared its counter with others is scaled by the time it ran. Where the kernel gives no
 * hardware counters (a virtual machine without them, a container without perf_event_open),
 * " counters=none:ERRNO" (ENOENT, EACCES, ...) instead; the command runs all the same. The
 * software clock comes last either way where the kernel has it: " task_clock_ns=N", the CPU
 * time of all the command's threads.
 *
 * With BENCH_COUNTERS=1, or BENCH_LINK=1 alone (bench/run.py's runs), the line also says how
 * long a cache line takes to go from one CPU to another, measured before the command starts:
 * " link_ns=N", N the nanoseconds of one way (two threads pinned to the first two CPUs the
 * helper may run on pass a counter back and forth in one line), or " link_ns=none" with one
 * CPU, where pinning fails, or where the second thread does not answer within a second. A
 * shared host may place a virtual machine's CPUs near each other or far apart, and change that
 * while it runs; a program that passes blocks between threads then runs at two speeds
 * (docs/measurements.md, session 34).
 */
#define _GNU_SOURCE /* strerrorname_np, pthread_setaffinity_np */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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

/* ---- the link between two CPUs (BENCH_COUNTERS=1) ---- */

#define LINK_TRIPS 20000 /* round trips: 40,000 transfers */

typedef struct {
  _Alignas(64) volatile long turn; /* even: the first thread's move; odd: the second's */
  int cpu;                         /* the second thread's CPU */
  volatile int gone;               /* the first thread gave up: the second stops */
} link_t;

static bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void *link_answer(void *arg) {
  link_t *l = arg;
  if (!pin(l->cpu)) return NULL;
  for (long i = 0; i < LINK_TRIPS && !l->gone; i++) {
    while (l->turn != 2 * i + 1)
      if (l->gone) return NULL;
    l->turn = 2 * i + 2;
  }
  return NULL;
}

/* Nanoseconds of one transfer between the first two CPUs of the helper's mask, or -1. */
static double link_ns(void) {
  cpu_set_t mask;
  int cpus[2], n = 0;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &mask)) cpus[n++] = c;
  if (n < 2) return -1;
  static link_t l;
  l.turn = 0;
  l.gone = 0;
  l.cpu = cpus[1];
  pthread_t t;
  if (pthread_create(&t, NULL, link_answer, &l) != 0) return -1;
  double ns = -1;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (pin(cpus[0])) {
    long i = 0;
    for (unsigned spins = 0; i < LINK_TRIPS; i++) {
      while (l.turn != 2 * i && (++spins % 4096 || seconds_since(&t0) < 1.0)) {
      }
      if (l.turn != 2 * i) break; /* no answer within a second */
      l.turn = 2 * i + 1;
    }
    if (i == LINK_TRIPS) ns = seconds_since(&t0) * 1e9 / (2.0 * LINK_TRIPS);
  }
  l.gone = 1;
  pthread_join(t, NULL);
  sched_setaffinity(0, sizeof mask, &mask); /* the command inherits the helper's own mask */
  return ns;
}

/* ---- hardware counters (BENCH_COUNTERS=1) ---- */

#define L1D_READ_MISS                                                                              \
  (PERF_COUNT_HW_CACHE_L1D | PERF_COUNT_HW_CACHE_OP_READ << 8 |                                   \
   PERF_COUNT_HW_CACHE_RESULT_MISS << 16)

/* A raw event (PERF_TYPE_RAW) is Intel's, counted on Intel processors only, with config on Ice
   Lake and later and config_skylake on Skylake and the cores before it. */
typedef struct {
  const char *name;
  uint32_t type;
  uint64_t config, config_skylake;
} counter_t;

static const counter_t counters[] = {
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0}, /* first: says if there are any */
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 0},
    {"l1d_misses", PERF_TYPE_HW_CACHE, L1D_READ_MISS, 0},
    {"llc_misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, 0},
    {"branch_misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, 0},
    {"clears_memory_ordering", PERF_TYPE_RAW, 0x02c3, 0x02c3}, /* MACHINE_CLEARS.MEMORY_ORDERING */
    {"store_forward_blocks", PERF_TYPE_RAW, 0x8203, 0x0203},   /* LD_BLOCKS.STORE_FORWARD */
    {"task_clock_ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 0}, /* CPU time, any kernel */
};
#define COUNTERS (sizeof counters / sizeof counters[0])

/* The processor's Intel model number (family 6), or -1 for another maker's. */
static int intel_model(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  int intel = 0, model = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL && model < 0) {
    if (strncmp(line, "vendor_id", 9) == 0) intel = strstr(line, "GenuineIntel") != NULL;
    if (strncmp(line, "model\t", 6) == 0 && strchr(line, ':') != NULL)
      model = atoi(strchr(line, ':') + 1);
  }
  if (f != NULL) fclose(f);
  return intel ? model : -1;
}

/* Whether Intel model model is Skylake, one of its client refreshes or an older core. */
static bool skylake_or_older(int model) {
  return model <= 0x5e || model == 0x8e || model == 0x9e || model == 0xa5 || model == 0xa6;
}

/* Opens the counters on process pid (waiting before its exec), to start at the exec; fds[i] is
   -1 for one it could not open. Returns 0, or why the first, the cycles, did not open. */
static int counters_open(pid_t pid, int *fds) {
  int model = intel_model(), err = 0;
  for (size_t i = 0; i < COUNTERS; i++) {
    bool raw = counters[i].type == PERF_TYPE_RAW;
    fds[i] = -1;
    if (raw && model < 0) continue;
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = counters[i].type;
    a.config = raw && skylake_or_older(model) ? counters[i].config_skylake : counters[i].config;
    a.disabled = 1;
    a.enable_on_exec = 1;
    a.inherit = 1; /* the threads it starts */
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    fds[i] = (int)syscall(SYS_perf_event_open, &a, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fds[i] < 0 && i == 0) err = errno;
  }
  return err;
}

/* Appends the counts that opened (scaled where the counter was shared) to out, and closes
   them. */
static void counters_write(FILE *out, const int *fds, int err) {
  if (err != 0) {
    const char *why = strerrorname_np(err);
    fprintf(out, " counters=none:%s", why != NULL ? why : "?");
  }
  for (size_t i = 0; i < COUNTERS; i++) {
    uint64_t v[3]; /* value, time enabled, time running */
    if (fds[i] < 0) continue;
    if (read(fds[i], v, sizeof v) == (ssize_t)sizeof v && v[2] > 0)
      fprintf(out, " %s=%.0f", counters[i].name, (double)v[0] * ((double)v[1] / (double)v[2]));
    close(fds[i]);
  }
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
  const char *counters_text = getenv("BENCH_COUNTERS");
  int counting = counters_text != NULL && strcmp(counters_text, "1") == 0;
  int go[2] = {-1, -1}; /* counting: the child execs once the counters are on it */
  if (counting && pipe(go) != 0) {
    fprintf(stderr, "bench_rusage: pipe: %s\n", strerror(errno));
    return 2;
  }
  const char *link_text = getenv("BENCH_LINK");
  int linking = counting || (link_text != NULL && strcmp(link_text, "1") == 0);
  double link = linking ? link_ns() : -1;
  struct timespec t0;
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
    unsetenv("BENCH_COUNTERS");
    unsetenv("BENCH_LINK");
    if (counting) {
      char byte;
      close(go[1]);
      while (read(go[0], &byte, 1) < 0 && errno == EINTR) {
      }
      close(go[0]);
    }
    execvp(argv[2], argv + 2);
    fprintf(stderr, "bench_rusage: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  child_pid = pid;
  int fds[COUNTERS], counters_err = 0;
  if (counting) {
    counters_err = counters_open(pid, fds);
    close(go[0]);
    close(go[1]); /* the child reads end of file: it goes on */
  }
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
  double wall = seconds_since(&t0);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  fprintf(out, "status=%d wall=%.6f utime=%.6f stime=%.6f maxrss_kib=%ld%s", code, wall,
          (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
          (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6, ru.ru_maxrss,
          timed_out ? " timeout=1" : "");
  if (linking) {
    if (link >= 0)
      fprintf(out, " link_ns=%.0f", link);
    else
      fputs(" link_ns=none", out);
  }
  if (counting) counters_write(out, fds, counters_err);
  fputc('\n', out);
  fclose(out);
  return code >= 0 ? code : 128 - code;
}
