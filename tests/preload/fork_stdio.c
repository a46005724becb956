/*
 * Concurrent fork() from several threads amid stdio, under LD_PRELOAD=libmagpie.so.
 *
 * FORKERS threads fork in a loop (each child mallocs, writes the block, frees it and leaves with
 * _exit) for RUN_S seconds; READERS threads read a file with getline(), which allocates while it
 * holds the FILE's lock; one thread calls fflush(NULL), which holds stdio's list lock while it
 * takes each FILE's lock. glibc's fork takes the list lock after running the atfork prepare
 * handlers, so an allocator whose prepare handler takes its locks first closes a cycle: fork holds
 * the allocator and waits for the list lock, fflush holds the list lock and waits for a FILE,
 * getline holds the FILE and waits for the allocator. The test passes when every thread
 * finishes its loop before the deadline and the forks were not starved; a deadlock is reported
 * by the deadline's handler.
 */
#include "../api/check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FORKERS 4
#define READERS 8
#define RUN_S 5     /* every thread loops this long */
#define FORKS_MIN 3 /* fewer in all means the forks were starved, not tested */
#define LINES 60
#define FLUSH_PAUSE_US 1000 /* a flush that never pauses starves fork of the list lock */
#define DEADLINE_S 60       /* threads still running then have deadlocked */

static char path[] = "/tmp/magpie-fork-stdio-XXXXXX";
static atomic_int running = 1;
static atomic_long forks_done, fork_failures;

static void *forker(void *arg) {
  (void)arg;
  for (int i = 0; atomic_load(&running); i++) {
    pid_t pid = fork();
    if (pid == 0) {
      char *p = malloc(100 + (size_t)i);
      if (p == NULL) _exit(3);
      memset(p, 1, 100);
      free(p);
      _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      atomic_fetch_add(&fork_failures, 1);
    else
      atomic_fetch_add(&forks_done, 1);
  }
  return NULL;
}

static void *reader(void *arg) {
  (void)arg;
  FILE *f = fopen(path, "r");
  if (f == NULL) return (void *)1;
  long lines = 0;
  while (atomic_load(&running)) {
    rewind(f);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) { /* a new buffer each line: getline mallocs */
      free(line);
      line = NULL;
      cap = 0;
      lines++;
    }
    free(line);
  }
  fclose(f);
  return lines > 0 ? NULL : (void *)1;
}

static void *flusher(void *arg) {
  (void)arg;
  while (atomic_load(&running)) {
    fflush(NULL);
    usleep(FLUSH_PAUSE_US);
  }
  return NULL;
}

int main(void) {
  api_begin("fork_stdio");
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  FILE *out = fdopen(fd, "w");
  REQUIRE(out != NULL);
  for (int i = 0; i < LINES; i++)
    fprintf(out, "%0*d\n", 1 + (i * 37) % 900, i); /* lengths 1..900: buffers of many classes */
  REQUIRE(fclose(out) == 0);

  api_deadline(DEADLINE_S, "fork, stdio and malloc deadlocked");

  pthread_t forkers[FORKERS], readers[READERS], flush;
  for (int i = 0; i < READERS; i++)
    REQUIRE(pthread_create(&readers[i], NULL, reader, NULL) == 0);
  REQUIRE(pthread_create(&flush, NULL, flusher, NULL) == 0);
  for (int i = 0; i < FORKERS; i++)
    REQUIRE(pthread_create(&forkers[i], NULL, forker, NULL) == 0);
  sleep(RUN_S);
  atomic_store(&running, 0);
  for (int i = 0; i < FORKERS; i++)
    pthread_join(forkers[i], NULL);
  pthread_join(flush, NULL);
  for (int i = 0; i < READERS; i++) {
    void *failed = NULL;
    pthread_join(readers[i], &failed);
    CHECK(failed == NULL);
  }
  unlink(path);
  CHECK(atomic_load(&fork_failures) == 0);
  CHECK(atomic_load(&forks_done) >= FORKS_MIN);
  fprintf(stderr, "fork_stdio: %ld forks in %d s\n", atomic_load(&forks_done), RUN_S);
  return api_end();
}
