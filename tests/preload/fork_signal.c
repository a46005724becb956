/*
 * fork() from a signal handler in a single-threaded program, under LD_PRELOAD=libmagpie.so.
 *
 * POSIX lets a single-threaded program call fork from a signal handler, and glibc keeps that
 * working while the interrupted thread is inside malloc. Here a timer sends SIGALRM to the
 * program every 2 ms while its only thread allocates, reallocates and frees without pause, and
 * forks itself now and then (the child leaves with _exit), so the handler's forks also land
 * inside the program's own fork; the handler forks, and the child leaves at once with _exit
 * (all a handler's child may do).
 *
 * The heap holds more than 32 MiB, where magpie would start its background thread in a program
 * that runs threads. This program has run none and must stay so: glibc's fork is
 * async-signal-safe only in a single-threaded process (in any other it holds its atfork lock
 * around the clone, and a handler's fork there waits for it forever), so the test checks that
 * the process still has one thread at the end.
 *
 * An allocator whose fork handler takes its own locks unconditionally hangs in the first fork
 * that interrupts it inside a lock; a deadline timer, renewed at each handler fork, turns that
 * into a failure with a message.
 */
#include "../api/check.h"
#include "threads_now.h"

#include <errno.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FORKS 1500             /* handler forks before the test passes */
#define HELD_BYTES (48u << 20) /* more than magpie's background-thread threshold */
#define HELD_BLOCK 8192
#define SLOTS 512
#define TICK_US 2000           /* forks land in the program's own code often */
#define DEADLINE_S 30          /* a run without a handler fork that long has deadlocked */
#define PROGRAM_FORK_EVERY 256 /* loop turns between the program's own forks */

static volatile sig_atomic_t forks_done, fork_failures;
static struct timespec last_end; /* when the handler's last fork and wait ended */
static long last_ns;             /* how long they took */

static long ns_between(struct timespec a, struct timespec b) {
  return (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
}

/* A tick whose program has not run for half as long as the last fork and wait took forks
   nothing: on a loaded machine those can take longer than TICK_US, and a handler that forks at
   every tick then runs again as soon as it returns, starving the program until the deadline. */
static void on_tick(int sig) {
  (void)sig;
  int saved = errno;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  if (ns_between(last_end, start) < last_ns / 2) return;
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid < 0)
    fork_failures++;
  else if (waitpid(pid, NULL, 0) == pid) {
    forks_done++;
    api_deadline_renew(); /* progress: a loaded machine is slow, not deadlocked */
  }
  clock_gettime(CLOCK_MONOTONIC, &last_end);
  last_ns = ns_between(start, last_end);
  errno = saved;
}

int main(void) {
  api_begin("fork_signal");
  static void *held[HELD_BYTES / HELD_BLOCK];
  for (size_t i = 0; i < HELD_BYTES / HELD_BLOCK; i++)
    REQUIRE((held[i] = malloc(HELD_BLOCK)) != NULL);

  api_deadline(DEADLINE_S, "fork from a signal handler deadlocked");

  struct sigaction sa = {.sa_handler = on_tick};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  REQUIRE(sigaction(SIGALRM, &sa, NULL) == 0);
  struct itimerval tick = {.it_interval = {0, TICK_US}, .it_value = {0, TICK_US}};
  REQUIRE(setitimer(ITIMER_REAL, &tick, NULL) == 0);

  void *slot[SLOTS] = {0};
  uint64_t state = 0x9e3779b97f4a7c15u;
  while (forks_done < FORKS && fork_failures == 0) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    size_t i = state % SLOTS, size = (state >> 20) % 4096 + 1;
    if ((state >> 50) % 4 == 0) size <<= 8; /* up to 1 MiB: large blocks take the arena's lock */
    if ((state >> 40) % 3 == 0) {
      void *p = realloc(slot[i], size);
      REQUIRE(p != NULL);
      slot[i] = p;
    } else {
      free(slot[i]);
      REQUIRE((slot[i] = malloc(size)) != NULL);
    }
    memset(slot[i], 0x5a, size < 64 ? size : 64);
    if ((state >> 30) % PROGRAM_FORK_EVERY == 0) {
      pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) _exit(0);
      int status = -1;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      CHECK(status == 0);
    }
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  CHECK(fork_failures == 0);
  CHECK(forks_done >= FORKS);
  CHECK(threads_now() == 1); /* magpie started no thread in a program that has run none */
  for (size_t i = 0; i < SLOTS; i++)
    free(slot[i]);
  for (size_t i = 0; i < HELD_BYTES / HELD_BLOCK; i++)
    free(held[i]);
  fprintf(stderr, "fork_signal: %d forks from the handler\n", (int)forks_done);
  return api_end();
}
