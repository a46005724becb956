/*
 * A signal handler's fork inside the program's own fork(), under LD_PRELOAD=libmagpie.so.
 *
 * glibc's tst-mallocfork2 found it by chance: a handler forks while the program's fork is
 * between magpie's prepare handler (every lock taken) and its parent or child handler. This
 * test puts the handler's fork there on purpose. It defines __register_atfork, the function
 * glibc's pthread_atfork calls, so magpie's registration comes here (the executable comes first
 * in symbol lookup); it registers wrappers that raise SIGUSR1 around magpie's handlers:
 *   A  after magpie's prepare      (magpie holds every lock: the inner fork takes nothing)
 *   B  before magpie's parent      (the same, in the parent)
 *   C  before magpie's child       (the same, in the child)
 *   D  after magpie's parent       (magpie holds nothing: the inner fork is a whole one)
 *   E  after magpie's child        (the same, in the child)
 * The handler forks (SA_NODEFER, so the inner fork's own windows nest a second level), and its
 * child leaves with _exit; where the inner fork was a whole one (no fork under way holds
 * magpie's locks, and the process is no child of a fork that took nothing) the child first
 * allocates and frees. After each of the program's forks, parent and
 * child allocate, free and check blocks of every kind (a 69,840-byte one among them: the size
 * tst-mallocfork2 hung on). The program stays single-threaded, as glibc's fork requires of a
 * handler's fork. Before the fix the first window A left magpie's locks held in the parent (and
 * in the child): a deadline timer fails the test instead of letting it hang.
 */
#include "../api/check.h"
#include "threads_now.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 12      /* the program's own forks */
#define NEST_MAX 2     /* handler forks nested inside each other, at most */
#define DEADLINE_S 60 /* a run still going then has deadlocked (it takes 0.2 s) */

enum { WIN_A, WIN_B, WIN_C, WIN_D, WIN_E, WINDOWS };
static const char window_names[WINDOWS] = {'A', 'B', 'C', 'D', 'E'};

/* magpie's handlers, as it registered them. */
static void (*magpie_prepare)(void), (*magpie_parent)(void), (*magpie_child)(void);
static int magpie_registrations; /* registrations of libmagpie's handlers wrapped */

static volatile sig_atomic_t raised_window; /* the window whose raise runs the handler now */
static volatile sig_atomic_t nest_depth;    /* handler forks under way */
static volatile sig_atomic_t restricted;    /* this process is a child of a fork that took
                                               nothing: only async-signal-safe calls here */
/* Forks under way whose prepare took magpie's locks and whose parent or child handler has not
   yet let go of them; and, per fork under way (innermost last), whether it was one. */
static volatile sig_atomic_t magpie_holds, forks_open, fork_took[2 * NEST_MAX + 2];
static volatile sig_atomic_t inner_forks[WINDOWS], inner_failures;

/* Allocates and frees one block of each kind; 0 when all came back whole. */
static int exercise_heap(unsigned salt) {
  static const size_t sizes[] = {16, 200, 4096, 69840, 300000, 2u << 20};
  void *blocks[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    blocks[i] = malloc(sizes[i]);
    if (blocks[i] == NULL) return 1;
    pattern_fill(blocks[i], sizes[i] < 256 ? sizes[i] : 256, salt + i);
  }
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i] < 256 ? sizes[i] : 256;
    if (pattern_find_mismatch(blocks[i], n, salt + i) != n) return 1;
    free(blocks[i]);
  }
  return 0;
}

static void on_usr1(int sig) {
  (void)sig;
  int saved = errno;
  int window = raised_window;
  /* Whether the inner fork will take and reset magpie's locks: only where no fork holds them,
     and not in a child that inherited them held. */
  bool whole = magpie_holds == 0 && !restricted;
  nest_depth++;
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* past the deadline, no child outlives the test */
    if (!whole) restricted = 1;
    _exit(whole ? exercise_heap(7) : 0);
  }
  int status = -1;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
    inner_failures++;
  else
    inner_forks[window]++;
  nest_depth--;
  errno = saved;
}

static void in_window(int window) {
  if (nest_depth >= NEST_MAX) return;
  raised_window = window;
  raise(SIGUSR1);
}

static void wrapped_prepare(void) {
  bool takes = magpie_holds == 0 && !restricted; /* what magpie's prepare decides, as seen here */
  magpie_prepare();
  fork_took[forks_open] = takes;
  forks_open++;
  magpie_holds += takes;
  in_window(WIN_A);
}

/* After magpie's parent or child handler: this fork's locks are let go of (or reset). */
static void fork_closed(void) {
  forks_open--;
  magpie_holds -= fork_took[forks_open];
}

static void wrapped_parent(void) {
  in_window(WIN_B);
  magpie_parent();
  fork_closed();
  in_window(WIN_D);
}

static void wrapped_child(void) {
  in_window(WIN_C);
  magpie_child();
  fork_closed();
  in_window(WIN_E);
}

/* glibc's registration entry (pthread_atfork calls it): magpie's handlers get the wrappers,
   everyone else's go through untouched. */
int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                      void *dso_handle) {
  typedef int register_fn(void (*)(void), void (*)(void), void (*)(void), void *);
  register_fn *next = (register_fn *)dlsym(RTLD_NEXT, "__register_atfork");
  if (next == NULL) abort();
  if (prepare && parent && child && strstr(api_object_of((void *)prepare), "libmagpie") &&
      magpie_prepare == NULL) {
    magpie_prepare = prepare, magpie_parent = parent, magpie_child = child;
    magpie_registrations++;
    return next(wrapped_prepare, wrapped_parent, wrapped_child, dso_handle);
  }
  return next(prepare, parent, child, dso_handle);
}

int main(void) {
  api_begin("fork_nested");
  REQUIRE(magpie_registrations == 1); /* magpie's handlers are the ones wrapped */
  api_deadline(DEADLINE_S, "a handler's fork inside the program's fork deadlocked");

  struct sigaction sa = {.sa_handler = on_usr1};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_NODEFER; /* an inner fork's windows nest one more level */
  REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);

  for (unsigned round = 0; round < ROUNDS; round++) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* a hung child goes with a parent past its deadline */
      /* windows C and E ran here, in this child's fork handlers */
      bool windows_ran = inner_forks[WIN_C] > 0 && inner_forks[WIN_E] > 0;
      _exit(windows_ran && inner_failures == 0 && exercise_heap(round) == 0 ? 0 : 1);
    }
    int status = -1;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(status == 0);
    CHECK(exercise_heap(round) == 0);
  }
  CHECK(inner_failures == 0);
  for (int w = 0; w < WINDOWS; w++) {
    /* C and E run in the children, whose counts stay there: each child checked its own */
    if (w == WIN_C || w == WIN_E) continue;
    if (inner_forks[w] < ROUNDS) {
      fprintf(stderr, "fork_nested: window %c: %d handler forks, expected >= %d\n",
              window_names[w], (int)inner_forks[w], ROUNDS);
      api_failures++;
    }
  }
  CHECK(threads_now() == 1); /* glibc's fork is async-signal-safe only in such a program */
  return api_end();
}
