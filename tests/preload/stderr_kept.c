/*
 * The statistics report at exit (MAGPIE_OPTIONS=stats=1) goes to the stderr the program started
 * with, and nowhere else:
 *   stderr_kept close        an atexit handler closes fd 2, as coreutils programs do; the report
 *                            must still appear on the original stderr;
 *   stderr_kept reuse FILE   an atexit handler closes fds 2..127, puts /dev/null on 2 and FILE
 *                            on every other number, magpie's copy of stderr among them; the
 *                            report must not land in FILE (the caller checks FILE holds only
 *                            "mine").
 * and magpie keeps its descriptors out of the program's way (os.h, OS_KEPT_FD_MIN):
 *   stderr_kept low [memfd]  closes the descriptors from 3 up that it inherited and runs itself
 *                            again, where magpie starts afresh; the first open there must get
 *                            descriptor 3, the lowest after stdin, stdout and stderr: under
 *                            stats=1 or debug mode magpie holds a copy of stderr, and under
 *                            publish_ms the live statistics' memfd, which `memfd` allocates
 *                            until magpie has made it and moved it to its kept number (and
 *                            fails if it never does).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FD_MAX 128
#define KEPT_FD_MIN 100 /* src/platform/os.h's OS_KEPT_FD_MIN */

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

/* Whether magpie's live statistics' memfd is open at its kept number and nowhere below it. The
   kernel gives a new memfd the lowest free number, and magpie's reaper thread moves it up at
   once (os_keep_fd): a program thread that looks in between sees it low, so waiting only for it
   to exist would let this program's open race with that move. */
static int live_memfd_kept(void) {
  DIR *d = opendir("/proc/self/fd");
  int high = 0, low = 0;
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    char path[320], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n > 0) {
      target[n] = '\0';
      if (strstr(target, "magpie-live-stats") != NULL)
        *(atoi(e->d_name) >= KEPT_FD_MIN ? &high : &low) += 1;
    }
  }
  if (d != NULL) closedir(d);
  return high > 0 && low == 0;
}

/* 0 when the program's first descriptor is 3 under magpie, after the live statistics' memfd
   was made if want_memfd. */
static int first_descriptor_low(int want_memfd) {
  if (dlsym(RTLD_DEFAULT, "magpie_malloc") == NULL) {
    fprintf(stderr, "stderr_kept: malloc is not magpie's\n");
    return 1;
  }
  /* slow paths over a few publish intervals, until the first publish makes the memfd */
  static void *blocks[20000];
  for (int round = 0; want_memfd && round < 50 && !live_memfd_kept(); round++) {
    for (int i = 0; i < 20000; i++)
      blocks[i] = malloc(16 + (size_t)(i % 64) * 16);
    for (int i = 0; i < 20000; i++)
      free(blocks[i]);
    usleep(20 * 1000);
  }
  if (want_memfd && !live_memfd_kept()) {
    fprintf(stderr, "stderr_kept: magpie kept no live statistics memfd at %d or above\n",
            KEPT_FD_MIN);
    return 1;
  }
  int fd = open("/dev/null", O_RDONLY);
  if (fd != 3) {
    fprintf(stderr, "stderr_kept: the program's first descriptor is %d, not 3\n", fd);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  free(malloc(100));
  if (argc >= 2 && strcmp(argv[1], "low") == 0) {
    for (int fd = 3; fd < FD_MAX; fd++)
      close(fd);
    char *again[] = {argv[0], "low-again", argc > 2 ? argv[2] : NULL, NULL};
    execv("/proc/self/exe", again);
    return 2;
  }
  if (argc >= 2 && strcmp(argv[1], "low-again") == 0)
    return first_descriptor_low(argc > 2 && strcmp(argv[2], "memfd") == 0);
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
