/*
 * The statistics report at exit (MAGPIE_OPTIONS=stats=1) goes to the stderr the program started
 * with, and nowhere else:
 *   stderr_kept close        an atexit handler closes fd 2, as coreutils programs do; the report
 *                            must still appear on the original stderr;
 *   stderr_kept reuse FILE   an atexit handler closes fds 2..63, puts /dev/null on 2 and FILE on
 *                            every other number, magpie's copy of stderr among them; the report
 *                            must not land in FILE (the caller checks FILE holds only "mine").
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FD_MAX 64

static const char *file;

static void close_stderr(void) {
  close(2);
}

static void reuse_fds(void) {
  for (int fd = 2; fd < FD_MAX; fd++)
    close(fd);
  if (open("/dev/null", O_WRONLY) != 2) _exit(3);
  int f = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (f != 3 || write(f, "mine\n", 5) != 5) _exit(3);
  while (dup(f) >= 0 && fcntl(FD_MAX - 1, F_GETFD) < 0) {
  }
}

int main(int argc, char **argv) {
  free(malloc(100));
  if (argc == 2 && strcmp(argv[1], "close") == 0) {
    atexit(close_stderr);
  } else if (argc == 3 && strcmp(argv[1], "reuse") == 0) {
    file = argv[2];
    atexit(reuse_fds);
  } else {
    return 2;
  }
  return 0;
}
