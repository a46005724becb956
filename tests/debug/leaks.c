/*
 * Known leaks for debug mode's leak report: 10 blocks of 48 bytes from leak_small, 3 blocks of
 * 5000 bytes from leak_big (both unreachable), and blocks still reachable, listed by leaks=all
 * and only counted by `leaks`: 777 bytes from keep_global that a global points to, 333 bytes
 * from held_by_thread that only the stack of a thread still blocked at exit points to, and 222
 * bytes from keep_in_mapping that only the program's own anonymous mapping points to (as an
 * interpreter's arenas do). `leaks fork`: a forked child also leaks 4242 bytes from
 * child_leak and exits; its report is made only with the `children` flag.
 */
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

void *kept_by_global;

NOINLINE void leak_small(void) {
  for (int i = 0; i < 10; i++) {
    char *volatile p = malloc(48);
    p[0] = 1;
  }
}

NOINLINE void leak_big(void) {
  for (int i = 0; i < 3; i++) {
    char *volatile p = malloc(5000);
    p[0] = 1;
  }
}

NOINLINE void keep_global(void) {
  kept_by_global = malloc(777);
}

NOINLINE void *held_by_thread(void) {
  char *p = malloc(333);
  p[0] = 1;
  return p;
}

NOINLINE void keep_in_mapping(void) {
  void **page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) exit(2);
  page[7] = malloc(222);
}

NOINLINE void child_leak(void) {
  char *volatile p = malloc(4242);
  p[0] = 1;
}

/* A child that leaks and exits normally: its report is the `children` flag's. */
static int fork_leaking_child(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    child_leak();
    exit(0);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 2;
  return 0;
}

static pthread_mutex_t holder_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t holder_ready = PTHREAD_COND_INITIALIZER;
static int holder_has_block;

/* Keeps its block's address in its own stack frame only, and never returns. */
static void *holder(void *arg) {
  (void)arg;
  void *volatile mine = held_by_thread();
  pthread_mutex_lock(&holder_lock);
  holder_has_block = 1;
  pthread_cond_signal(&holder_ready);
  pthread_mutex_unlock(&holder_lock);
  for (;;)
    pause();
  return mine;
}

/* Overwrites the dead stack below main, where the leaked pointers were. */
NOINLINE void scrub_stack(void) {
  volatile char junk[16384];
  memset((char *)junk, 0, sizeof junk);
}

int main(int argc, char **argv) {
  leak_small();
  leak_big();
  keep_global();
  keep_in_mapping();
  void *freed = malloc(100); /* freed: never reported */
  free(freed);
  pthread_t t;
  if (pthread_create(&t, NULL, holder, NULL) != 0) return 2;
  pthread_mutex_lock(&holder_lock);
  while (!holder_has_block)
    pthread_cond_wait(&holder_ready, &holder_lock);
  pthread_mutex_unlock(&holder_lock);
  if (argc > 1 && strcmp(argv[1], "fork") == 0 && fork_leaking_child() != 0) return 2;
  scrub_stack();
  printf("leaks done\n");
  return 0;
}
