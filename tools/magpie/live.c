/* live: the reader of a running process's statistics area. The area is a memfd the library
 * names MAGPIE_AREA_NAME; /proc/PID/fd/N links to "/memfd:magpie-live-stats (deleted)", and opening
 * that link opens the memfd itself (the kernel allows it to whoever may ptrace-read the
 * process: its owner or root). The area is mapped read-only, and each read copies it whole
 * under its sequence lock: take seq (acquire), copy, fence, take seq again; the copy counts only
 * when seq was even and unchanged. Rows are widened to this tool's layout, so a newer library
 * with longer rows (same major) reads as far as this tool knows. */
#include "live.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LIVE_TRIES 1000                  /* copies tried before giving up (LIVE_BUSY) */
#define LIVE_AREA_MAX ((size_t)64 << 20) /* a larger area is not magpie's */

struct live {
  const char *base; /* the mapping */
  size_t size;
  char *copy; /* the last copy */
};

/* Whether a /proc/PID/fd link's target is the area's memfd: "/memfd:NAME", with " (deleted)"
   after it (the kernel's mark of a memfd), and nothing else: other memfds may share a prefix. */
static int is_area_link(const char *target) {
  static const char want[] = "/memfd:" MAGPIE_AREA_NAME;
  size_t n = sizeof want - 1;
  return strncmp(target, want, n) == 0 &&
         (target[n] == '\0' || strcmp(target + n, " (deleted)") == 0);
}

/* Finds the fd of pid whose link names the area; returns it opened, or -1 (errno). */
static int find_area(pid_t pid, int *saw_fds) {
  char dir[64], link[64 + 256], target[256];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return -1;
  *saw_fds = 1;
  int fd = -1;
  for (struct dirent *e; fd < 0 && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (is_area_link(target)) fd = open(link, O_RDONLY | O_CLOEXEC);
  }
  closedir(d);
  return fd;
}

/* The publisher makes the area in three steps (create the memfd, size it, write the first
   snapshot), and the memfd shows in /proc/PID/fd from the first: a reader that comes between
   them sees an empty file, or a zeroed one without the magic. It waits for the steps to finish
   (LIVE_FIRST_WAIT_MS at most) before calling the area bad. */
#define LIVE_FIRST_WAIT_MS 2000

/* Whether the area mapped at p of size bytes is still being made: sized but never written. */
static int area_unwritten(const void *p) {
  const magpie_area_t *h = p;
  return __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) == 0 && h->magic == 0;
}

/* One try at opening pid's area; *unfinished is set when the publisher has not finished making
   it (live_open tries again). */
static int live_open_once(pid_t pid, live_t **out, char *why, size_t cap, int *unfinished) {
  int saw_fds = 0;
  errno = 0;
  int fd = find_area(pid, &saw_fds);
  if (fd < 0) {
    if (!saw_fds) {
      snprintf(why, cap, "cannot read /proc/%d/fd: %s (no such process, or not yours?)", (int)pid,
               strerror(errno));
      return LIVE_NO_PROCESS;
    }
    snprintf(why, cap,
             "process %d has no magpie statistics area: it does not run magpie, or has not "
             "published yet (the reap publishes every publish_ms, reap_ms by default)",
             (int)pid);
    return LIVE_NO_AREA;
  }
  struct stat st;
  int stat_ok = fstat(fd, &st) == 0;
  if (!stat_ok || (size_t)st.st_size < sizeof(magpie_area_t) ||
      (size_t)st.st_size > LIVE_AREA_MAX) {
    *unfinished = stat_ok && st.st_size == 0; /* created, not sized yet */
    close(fd);
    snprintf(why, cap, "process %d: the statistics area has a bad size", (int)pid);
    return LIVE_BAD_AREA;
  }
  size_t size = (size_t)st.st_size;
  void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  live_t *l = calloc(1, sizeof *l);
  char *copy = malloc(size);
  if (p == MAP_FAILED || !l || !copy) {
    snprintf(why, cap, "cannot map the statistics area: %s", strerror(errno));
    if (p != MAP_FAILED) munmap(p, size);
    free(l);
    free(copy);
    return LIVE_BAD_AREA;
  }
  l->base = p;
  l->size = size;
  l->copy = copy;
  const magpie_area_t *h = p;
  if (h->magic != MAGPIE_AREA_MAGIC) {
    *unfinished = area_unwritten(p);
    live_close(l);
    snprintf(why, cap, "process %d: the area is not a magpie statistics area", (int)pid);
    return LIVE_BAD_AREA;
  }
  if (h->major != MAGPIE_AREA_MAJOR) {
    snprintf(why, cap,
             "process %d publishes statistics layout %u.%u; this magpie reads layout %d.x only "
             "(use the magpie that came with its library)",
             (int)pid, h->major, h->minor, MAGPIE_AREA_MAJOR);
    live_close(l);
    return LIVE_BAD_VERSION;
  }
  *out = l;
  return LIVE_OK;
}

/* Whether pid maps magpie's shared library (a process that preloads or links it). */
static int maps_magpie(pid_t pid) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f))
    found = strstr(line, "/libmagpie.so") != NULL;
  fclose(f);
  return found;
}

/* The interval pid publishes at, in ms: publish_ms, or reap_ms, of the MAGPIE_OPTIONS in its
   environment (as it was at its exec), or reap_ms's default; at most LIVE_PUBLISH_WAIT_MAX_MS. */
#define LIVE_REAP_MS_DEFAULT 1000
#define LIVE_PUBLISH_WAIT_MAX_MS 10000
static long publish_interval_ms(pid_t pid) {
  char path[64], env[16384];
  snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
  long publish = 0, reap = LIVE_REAP_MS_DEFAULT;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, env, sizeof env - 1) : -1;
  if (fd >= 0) close(fd);
  for (ssize_t at = 0; n > 0 && at < n; at += (ssize_t)strlen(env + at) + 1) {
    env[n] = '\0';
    if (strncmp(env + at, "MAGPIE_OPTIONS=", 15) != 0) continue;
    const char *p = strstr(env + at, "publish_ms="), *r = strstr(env + at, "reap_ms=");
    if (p) publish = strtol(p + 11, NULL, 10);
    if (r) reap = strtol(r + 8, NULL, 10);
  }
  long ms = publish > 0 ? publish : reap > 0 ? reap : LIVE_REAP_MS_DEFAULT;
  return ms < LIVE_PUBLISH_WAIT_MAX_MS ? ms : LIVE_PUBLISH_WAIT_MAX_MS;
}

int live_open(pid_t pid, live_t **out, char *why, size_t cap) {
  long wait_ms = LIVE_FIRST_WAIT_MS;
  int runs_magpie = -1; /* not asked yet */
  for (long waited_ms = 0;; waited_ms += 10) {
    int unfinished = 0;
    int rc = live_open_once(pid, out, why, cap, &unfinished);
    if (rc == LIVE_NO_AREA) {
      /* magpie publishes its first snapshot as the process starts, a forked child's within one
         interval: wait that long (and a margin, for a busy machine) for the area to appear. */
      if (runs_magpie < 0) {
        runs_magpie = maps_magpie(pid);
        if (runs_magpie) wait_ms = publish_interval_ms(pid) + LIVE_FIRST_WAIT_MS;
      }
      unfinished = runs_magpie;
    }
    if (!unfinished || waited_ms >= wait_ms) return rc;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Copies count rows of have bytes each at offset off of the copy into rows of want bytes. */
static void *widen_rows(const char *copy, size_t size, uint32_t off, uint32_t count, uint32_t have,
                        size_t want) {
  void *rows = calloc(count ? count : 1, want);
  if (!rows) return NULL;
  size_t n = have < want ? have : want;
  for (uint32_t i = 0; i < count; i++) {
    size_t at = (size_t)off + (size_t)i * have;
    if (at + n > size) break;
    memcpy((char *)rows + (size_t)i * want, copy + at, n);
  }
  return rows;
}

int live_read(live_t *l, live_snapshot_t *snap, char *why, size_t cap) {
  const magpie_area_t *h = (const magpie_area_t *)l->base;
  memset(snap, 0, sizeof *snap);
  for (int tries = 0; tries < LIVE_TRIES; tries++) {
    uint64_t seq = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
    if (seq & 1) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
      continue;
    }
    memcpy(l->copy, l->base, l->size);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&h->seq, __ATOMIC_RELAXED) != seq) continue;
    const magpie_area_t *c = (const magpie_area_t *)l->copy;
    if (c->header_size < offsetof(magpie_area_t, threads_live) || c->area_size > l->size) {
      snprintf(why, cap, "the statistics area is inconsistent");
      return LIVE_BAD_AREA;
    }
    memcpy(&snap->head, c, c->header_size < sizeof snap->head ? c->header_size : sizeof snap->head);
    snap->classes = widen_rows(l->copy, l->size, c->class_offset, c->class_count, c->class_row_size,
                               sizeof *snap->classes);
    snap->locks = widen_rows(l->copy, l->size, c->lock_offset, c->lock_count, c->lock_row_size,
                             sizeof *snap->locks);
    snap->cpus = widen_rows(l->copy, l->size, c->cpu_offset, c->cpu_count, c->cpu_row_size,
                            sizeof *snap->cpus);
    const magpie_area_t *head = &snap->head; /* fields past the writer's header read as 0 */
    snap->threads = widen_rows(l->copy, l->size, head->thread_offset, head->thread_count,
                               head->thread_row_size, sizeof *snap->threads);
    if (!snap->classes || !snap->locks || !snap->cpus || !snap->threads) {
      live_snapshot_free(snap);
      snprintf(why, cap, "out of memory");
      return LIVE_BAD_AREA;
    }
    return LIVE_OK;
  }
  snprintf(why, cap, "the process kept rewriting its statistics area; try again");
  return LIVE_BUSY;
}

void live_snapshot_free(live_snapshot_t *snap) {
  free(snap->classes);
  free(snap->locks);
  free(snap->cpus);
  free(snap->threads);
  snap->classes = NULL;
  snap->locks = NULL;
  snap->cpus = NULL;
  snap->threads = NULL;
}

void live_close(live_t *l) {
  if (!l) return;
  munmap((void *)l->base, l->size);
  free(l->copy);
  free(l);
}
