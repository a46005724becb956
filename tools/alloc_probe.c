/*
 * alloc_probe: a program with known allocation behaviour, for the tests of the magpie command.
 *
 *   alloc_probe [COUNT [SIZE]]   COUNT mallocs of SIZE bytes (default 1000 x 100), all live at
 *                                once, then COUNT frees; exits 0
 *   alloc_probe --quick-exit     allocates, then leaves by _exit(0): no exit handlers run
 *   alloc_probe --fork N         runs N children that each allocate and exit(0), waits for them
 *
 * It is built with -fno-builtin so the compiler keeps every malloc and free.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Pointers live in a global array so that no call can be proven dead. */
static void **slots;

static int churn(size_t count, size_t size) {
  slots = malloc(count * sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < count; i++) {
    slots[i] = malloc(size);
    if (!slots[i]) return -1;
    memset(slots[i], (int)(i & 0xff), size);
  }
  for (size_t i = 0; i < count; i++)
    free(slots[i]);
  free(slots);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--quick-exit") == 0) {
    if (churn(100, 64) < 0) return 1;
    _exit(0);
  }
  if (argc >= 3 && strcmp(argv[1], "--fork") == 0) {
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
      pid_t pid = fork();
      if (pid < 0) return 1;
      if (pid == 0) exit(churn(10, 32) < 0);
    }
    int status, failed = 0;
    while (wait(&status) > 0)
      failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
  }
  size_t count = argc >= 2 ? strtoul(argv[1], NULL, 10) : 1000;
  size_t size = argc >= 3 ? strtoul(argv[2], NULL, 10) : 100;
  if (churn(count, size) < 0) {
    fputs("alloc_probe: out of memory\n", stderr);
    return 1;
  }
  return 0;
}
