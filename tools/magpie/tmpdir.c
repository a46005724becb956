/* tmpdir: creating, listing and removing the statistics directory. The directory's path is
 * handed to the library inside MAGPIE_OPTIONS, so it must be short enough for the library's
 * option buffer and free of the characters that separate or expand options; a TMPDIR that is
 * not falls back to /tmp. mkdtemp makes the name unique and the directory private. */
#include "tmpdir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tool.h"

/* The longest stats_file value the tool hands the library, whose option buffer holds 255 bytes;
 * a longer TMPDIR falls back to /tmp. */
#define STATS_PATH_MAX 200
#define STATS_DIR_NAME "magpie-stats.XXXXXX"

int make_stats_dir(char *dir, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  /* The path goes into MAGPIE_OPTIONS, where ',' and '=' separate options and '%' expands. */
  if (!tmp || tmp[0] != '/' || strpbrk(tmp, ",=%") ||
      strlen(tmp) + sizeof("/" STATS_DIR_NAME "/" STATS_PREFIX "%p") > STATS_PATH_MAX)
    tmp = "/tmp";
  if ((size_t)snprintf(dir, cap, "%s/" STATS_DIR_NAME, tmp) >= cap || !mkdtemp(dir)) {
    error("cannot create a temporary directory in %s: %s", tmp, strerror(errno));
    return -1;
  }
  return 0;
}

size_t count_other_stats(const char *dir, pid_t program) {
  char own[32];
  size_t others = 0;
  snprintf(own, sizeof own, STATS_PREFIX "%d", (int)program);
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      others += strncmp(e->d_name, STATS_PREFIX, strlen(STATS_PREFIX)) == 0 &&
                strcmp(e->d_name, own) != 0;
    closedir(d);
  }
  return others;
}

void remove_stats_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
  }
  if (rmdir(dir) < 0) error("warning: could not remove %s: %s", dir, strerror(errno));
}
