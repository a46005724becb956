/*
 * fork() while other threads allocate, under LD_PRELOAD=libmagpie.so.
 *
 * Worker threads allocate and free without pause while the main thread forks CHILDREN times. A
 * fork can catch an allocator lock held by another thread; the allocator must make the child's
 * allocator usable anyway (glibc does, and programs rely on it: a child that mallocs between fork
 * and exec). Each child allocates blocks of every kind, starts a thread that does the same, checks
 * the contents, and exits normally (running the allocator's exit work). A child that deadlocks is
 * killed by its alarm; any child that does not exit with status 0 fails the test.
 *
 * One more thread frees and trims without pause, a TRIM_BYTES block and TRIM_SMALL small blocks
 * but one in TRIM_KEEP, so that forks land while the allocator gives pages back outside its
 * locks, whole ones and pages inside slabs: the child must not inherit that work half done.
 *
 * The parent holds HELD_BYTES, enough for the allocator to run a background thread. A child of a
 * multithreaded process may only call async-signal-safe functions until it execs, so the
 * allocator must not start a thread of its own there: each child checks that, after allocating,
 * it is still its only thread.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS 3
#define CHILDREN 60
#define CHILD_ALARM_S 20 /* a child still running after this is deadlocked */
#define SLOTS 256
#define HELD_BYTES ((size_t)48 << 20)
#define HELD_BLOCK 4096
#define TRIM_BYTES ((size_t)32 << 20)
#define TRIM_SMALL 65536
#define TRIM_KEEP 64

static atomic_int stop_workers;

static uint64_t next_random(uint64_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

static size_t random_size(uint64_t *state) {
  uint64_t r = next_random(state);
  switch (r % 16) {
  case 0:
    return (size_t)(r >> 8) % (512 * 1024) + 1; /* large */
  case 1:
  case 2:
    return (size_t)(r >> 8) % 16384 + 1;
  default:
    return (size_t)(r >> 8) % 512 + 1;
  }
}

/* Allocates, fills, checks and frees `rounds` times over SLOTS slots; returns the number of
 * corrupted blocks seen. */
static unsigned long churn(uint64_t seed, int rounds) {
  unsigned char *slot[SLOTS] = {0};
  size_t size[SLOTS] = {0};
  unsigned long bad = 0;
  uint64_t state = seed | 1;
  for (int r = 0; r < rounds; r++) {
    int i = (int)(next_random(&state) % SLOTS);
    if (slot[i] != NULL) {
      unsigned char tag = (unsigned char)((uintptr_t)slot[i] >> 4);
      if (slot[i][0] != tag || slot[i][size[i] - 1] != tag) bad++;
      if (r % 3 == 0) {
        size_t grown = random_size(&state);
        unsigned char *moved = realloc(slot[i], grown);
        if (moved == NULL) return bad + 1;
        slot[i] = moved;
        size[i] = grown;
        tag = (unsigned char)((uintptr_t)moved >> 4);
        moved[0] = tag;
        moved[grown - 1] = tag;
        continue;
      }
      free(slot[i]);
      slot[i] = NULL;
    } else {
      size[i] = random_size(&state);
      slot[i] = r % 5 == 0 ? calloc(1, size[i]) : malloc(size[i]);
      if (slot[i] == NULL) return bad + 1;
      unsigned char tag = (unsigned char)((uintptr_t)slot[i] >> 4);
      slot[i][0] = tag;
      slot[i][size[i] - 1] = tag;
    }
  }
  for (int i = 0; i < SLOTS; i++)
    free(slot[i]);
  return bad;
}

static void *worker(void *arg) {
  uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ULL;
  unsigned long bad = 0;
  while (!atomic_load(&stop_workers))
    bad += churn(seed++, 2000);
  return (void *)(uintptr_t)bad;
}

/* Writes a big block and small ones, frees the big one and the small ones but one in
   TRIM_KEEP, and trims: the trim purges the big block's pages (a free past the allocator's
   retained bytes releases them) and the pages inside slabs that hold no small block. */
static void *trimmer(void *arg) {
  (void)arg;
  static char *small[TRIM_SMALL];
  while (!atomic_load(&stop_workers)) {
    char *p = malloc(TRIM_BYTES);
    if (p == NULL) return (void *)1;
    memset(p, 1, TRIM_BYTES);
    free(p);
    for (int i = 0; i < TRIM_SMALL; i++) {
      if ((small[i] = malloc(64)) == NULL) return (void *)1;
      memset(small[i], 2, 64);
    }
    for (int i = 0; i < TRIM_SMALL; i++)
      if (i % TRIM_KEEP) free(small[i]);
    malloc_trim(0);
    for (int i = 0; i < TRIM_SMALL; i += TRIM_KEEP)
      free(small[i]);
  }
  return NULL;
}

static void *child_thread(void *arg) {
  return (void *)(uintptr_t)churn((uint64_t)(uintptr_t)arg, 5000);
}

/* The number of threads in this process, from /proc/self/status; -1 if unreadable. */
static int thread_count(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  int n = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

static int child_main(int index) {
  alarm(CHILD_ALARM_S);
  unsigned long bad = churn((uint64_t)index * 7919 + 1, 5000);
  int threads = thread_count();
  if (threads != 1) {
    fprintf(stderr, "fork_threads: child %d has %d threads before starting any\n", index, threads);
    return 6;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)(index + 1)) != 0) return 3;
  void *result = NULL;
  pthread_join(t, &result);
  bad += (unsigned long)(uintptr_t)result;
  /* stdio allocates too */
  char *line = NULL;
  if (asprintf(&line, "child %d", index) < 0) return 4;
  free(line);
  return bad == 0 ? 0 : 5;
}

int main(void) {
  /* Under ctest, refuse to pass with another malloc (ld.so only warns about a bad LD_PRELOAD). */
  const char *require = getenv("MAGPIE_TEST_REQUIRE");
  if (require != NULL && strcmp(require, "1") == 0 &&
      dlsym(RTLD_DEFAULT, "magpie_malloc") == NULL) {
    fprintf(stderr, "fork_threads: magpie is not loaded (LD_PRELOAD=%s)\n",
            getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
    return 1;
  }
  static void *held[HELD_BYTES / HELD_BLOCK];
  for (size_t i = 0; i < HELD_BYTES / HELD_BLOCK; i++)
    if ((held[i] = malloc(HELD_BLOCK)) == NULL) return 1;
  pthread_t workers[WORKERS + 1];
  for (int i = 0; i <= WORKERS; i++)
    if (pthread_create(&workers[i], NULL, i < WORKERS ? worker : trimmer,
                       (void *)(uintptr_t)(i + 1)) != 0) {
      fprintf(stderr, "fork_threads: pthread_create failed\n");
      return 1;
    }
  int failures = 0;
  for (int c = 0; c < CHILDREN; c++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork_threads: fork");
      failures++;
      break;
    }
    if (pid == 0) exit(child_main(c));
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
      perror("fork_threads: waitpid");
      failures++;
      continue;
    }
    if (WIFSIGNALED(status)) {
      fprintf(stderr, "fork_threads: child %d killed by signal %d (%s)%s\n", c, WTERMSIG(status),
              strsignal(WTERMSIG(status)),
              WTERMSIG(status) == SIGALRM ? ": deadlocked after fork" : "");
      failures++;
    } else if (WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork_threads: child %d exited with status %d\n", c, WEXITSTATUS(status));
      failures++;
    }
    /* The parent keeps allocating between forks too. */
    if (churn((uint64_t)c + 99, 500) != 0) {
      fprintf(stderr, "fork_threads: corruption in the parent\n");
      failures++;
    }
  }
  for (size_t i = 0; i < HELD_BYTES / HELD_BLOCK; i++)
    free(held[i]);
  atomic_store(&stop_workers, 1);
  for (int i = 0; i <= WORKERS; i++) {
    void *bad = NULL;
    pthread_join(workers[i], &bad);
    if (bad != NULL) {
      fprintf(stderr, "fork_threads: worker %d saw %lu corrupted blocks\n", i,
              (unsigned long)(uintptr_t)bad);
      failures++;
    }
  }
  if (failures != 0) {
    fprintf(stderr, "fork_threads: FAILED (%d)\n", failures);
    return 1;
  }
  printf("fork_threads: %d children forked amid %d allocating threads, all ok\n", CHILDREN,
         WORKERS);
  return 0;
}
