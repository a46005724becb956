/*
 * os_parent: the parent-process probe: what another process maps and what its environment says.
 *
 * Theory
 *   1. Debug mode asks whether the parent runs magpie in debug mode too (it maps the same
 *      library file, and its environment names MAGPIE_DEBUG), from /proc/PID/maps and
 *      /proc/PID/environ: a library file is known by its device and inode, not its path.
 * Nothing here allocates or takes a lock of magpie's.
 */
#define _GNU_SOURCE
#include "os.h"
#include "os_impl.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int os_parent_pid(void) {
  return (int)getppid();
}

typedef struct object_query {
  uintptr_t addr;
  char id[64]; /* "DEVICE INODE" of the file mapped at addr; empty until found */
  bool found;
} object_query_t;

/* The device and inode fields of a maps line's rest ("PERMS OFFSET DEVICE INODE PATH"). */
static bool maps_file_id(const char *rest, char *id, size_t cap) {
  for (int field = 0; field < 2; field++) {
    while (*rest && *rest != ' ')
      rest++;
    while (*rest == ' ')
      rest++;
  }
  size_t n = 0;
  for (int field = 0; field < 2 && *rest; field++) {
    if (field) id[n++] = ' ';
    while (*rest && *rest != ' ' && n + 2 < cap)
      id[n++] = *rest++;
    while (*rest == ' ')
      rest++;
  }
  id[n] = '\0';
  return n > 0 && strcmp(id + n - 2, " 0") != 0; /* inode 0: anonymous */
}

static void object_of_addr_step(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest) {
  object_query_t *q = ctx;
  if (q->addr >= lo && q->addr < hi) q->found = maps_file_id(rest, q->id, sizeof q->id);
}

static void object_mapped_step(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest) {
  object_query_t *q = ctx;
  char id[64];
  (void)lo, (void)hi;
  if (!q->found && maps_file_id(rest, id, sizeof id) && strcmp(id, q->id) == 0) q->found = true;
}

bool os_pid_maps_object_of(int pid, uintptr_t addr) {
  object_query_t q = {.addr = addr};
  os_maps_each(0, object_of_addr_step, &q);
  if (!q.found) return false;
  q.found = false;
  os_maps_each(pid, object_mapped_step, &q);
  return q.found;
}

bool os_pid_env_has(int pid, const char *name_eq) {
  char path[48], buf[4096];
  os_proc_path(path, pid, "environ");
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return false;
  size_t len = strlen(name_eq), matched = 0; /* bytes of name_eq matched; SIZE_MAX: none */
  bool found = false;
  ssize_t n;
  while (!found && (n = os_read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n && !found; i++) {
      if (buf[i] == '\0')
        matched = 0;
      else if (matched != SIZE_MAX)
        matched = buf[i] == name_eq[matched] ? matched + 1 : SIZE_MAX;
      found = matched == len;
    }
  os_close(fd);
  return found;
}
