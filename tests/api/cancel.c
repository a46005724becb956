/*
 * Thread cancellation never leaves an allocator lock held.
 *
 * A thread with deferred cancellation calls malloc_stats, malloc_info and malloc/free in a
 * loop, with pthread_testcancel between calls; the main thread cancels it at a random moment,
 * ROUNDS times. glibc's malloc_stats is no cancellation point; an allocator that writes its
 * report through write(2) while holding its statistics lock is cancelled there, and the next
 * report or fork waits for that lock forever. After each cancellation the main thread prints a
 * report and forks, under a deadline that turns a hang into a failure.
 */
#include "check.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 40
#define DEADLINE_S 30

static int saved_stderr = 2; /* stderr while fd 2 is /dev/null */

static void on_deadline(int sig) {
  (void)sig;
  static const char msg[] = "cancel: deadline passed: a cancelled thread left a lock held\n";
  (void)!write(saved_stderr, msg, sizeof msg - 1);
  _exit(2);
}

static void *reporter(void *arg) {
  FILE *sink = arg;
  for (unsigned i = 0;; i++) {
    malloc_stats();
    malloc_info(0, sink);
    free(malloc(opaque_size(64 + i % 4096)));
    pthread_testcancel();
  }
  return NULL;
}

int main(void) {
  api_begin("cancel");
  FILE *sink = fopen("/dev/null", "w");
  REQUIRE(sink != NULL);
  int null = open("/dev/null", O_WRONLY);
  saved_stderr = dup(2);
  REQUIRE(saved_stderr >= 0 && null >= 0);
  signal(SIGALRM, on_deadline);
  alarm(DEADLINE_S);
  fflush(stderr);
  REQUIRE(dup2(null, 2) == 2); /* the reports go nowhere while the rounds run */
  unsigned seed = 12345;
  int not_cancelled = 0, failed_forks = 0;
  for (int round = 0; round < ROUNDS; round++) {
    pthread_t t;
    if (pthread_create(&t, NULL, reporter, sink) != 0) break;
    seed = seed * 1103515245u + 12345u;
    struct timespec pause = {0, (long)(seed >> 8) % 3000000};
    nanosleep(&pause, NULL);
    void *result = NULL;
    if (pthread_cancel(t) != 0 || pthread_join(t, &result) != 0 || result != PTHREAD_CANCELED)
      not_cancelled++;
    malloc_stats();     /* hangs if the cancelled thread held the statistics lock */
    pid_t pid = fork(); /* hangs if it held any lock fork takes */
    if (pid == 0) _exit(0);
    if (pid < 0 || waitpid(pid, NULL, 0) != pid) failed_forks++;
  }
  alarm(0);
  REQUIRE(dup2(saved_stderr, 2) == 2);
  CHECK(not_cancelled == 0);
  CHECK(failed_forks == 0);
  fclose(sink);
  return api_end();
}
