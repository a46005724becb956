/*
 * os_file: files, written and read with raw system calls; shared and file mappings; the fatal
 * error.
 *
 * Theory
 *   1. Files are opened, read, written and closed with raw system calls, not libc's wrappers:
 *      those are cancellation points, and a thread cancelled inside a report would leave the
 *      lock it writes under held for good (malloc_stats, as glibc's, is no cancellation point).
 *   2. The live statistics area is a memfd mapped shared (os_map_shared), numbered out of the
 *      way of the program's low descriptors; symbolising maps whole files read-only.
 * Nothing here allocates or takes a lock of magpie's; all of it is safe from any thread at any
 * time.
 */
#define _GNU_SOURCE
#include "os.h"
#include "os_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
void os_fatal(const char *what) {
  static const char prefix[] = "magpie: fatal: ";
  os_write_all(2, prefix, sizeof prefix - 1);
  os_write_all(2, what, strlen(what));
  os_write_all(2, "\n", 1);
  abort();
}

/* Files through raw system calls: no cancellation point (theory 1). */
int os_open(const char *path, int flags, int mode) {
  return (int)syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC, mode);
}

ssize_t os_read(int fd, void *buf, size_t len) {
  ssize_t n;
  while ((n = syscall(SYS_read, fd, buf, len)) < 0 && errno == EINTR) {
  }
  return n;
}

void os_close(int fd) {
  syscall(SYS_close, fd);
}

ssize_t os_read_file(const char *path, char *buf, size_t cap) {
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return -1;
  size_t have = 0;
  ssize_t n = 0;
  while (have < cap - 1 && (n = os_read(fd, buf + have, cap - 1 - have)) > 0)
    have += (size_t)n; /* files of /proc come a page per read */
  os_close(fd);
  if (n < 0) return -1;
  buf[have] = '\0';
  return (ssize_t)have;
}

int os_open_private(const char *path) {
  int fd = os_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
  struct stat st;
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH))) {
    os_close(fd);
    return -1;
  }
  return fd;
}

void os_unlink(const char *path) {
  syscall(SYS_unlinkat, AT_FDCWD, path, 0);
}

void os_write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = syscall(SYS_write, fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= (size_t)n;
  }
}

int os_open_write(const char *path) {
  return os_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
}

/* A close-on-exec copy of fd numbered min or more; -1 on failure. */
static int dup_from(int fd, int min) {
  return (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, min);
}

int os_dup(int fd) {
  int copy = dup_from(fd, OS_KEPT_FD_MIN);
  return copy >= 0 ? copy : dup_from(fd, 3);
}

int os_keep_fd(int fd) {
  if (fd < 0 || fd >= OS_KEPT_FD_MIN) return fd;
  int high = dup_from(fd, OS_KEPT_FD_MIN);
  if (high < 0) return fd;
  os_close(fd);
  return high;
}

void *os_map_shared(const char *name, size_t size, int *fd) {
  int made = os_keep_fd((int)syscall(SYS_memfd_create, name, MFD_CLOEXEC)); /* raw: theory 1 */
  if (made < 0) return NULL;
  void *p = MAP_FAILED;
  if (syscall(SYS_ftruncate, made, (off_t)size) == 0)
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, made, 0);
  if (p == MAP_FAILED) {
    os_close(made);
    return NULL;
  }
  *fd = made;
  return p;
}

bool os_file_id(int fd, uint64_t id[2]) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  id[0] = (uint64_t)st.st_dev;
  id[1] = (uint64_t)st.st_ino;
  return true;
}

void *os_map_file(const char *path, size_t *size) {
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return NULL;
  off_t end = lseek(fd, 0, SEEK_END);
  void *p = end > 0 ? mmap(NULL, (size_t)end, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  os_close(fd);
  if (p == MAP_FAILED) return NULL;
  *size = (size_t)end;
  return p;
}

void os_unmap_file(void *p, size_t size) {
  munmap(p, size);
}
