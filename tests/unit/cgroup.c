/* The cgroup v2 limits (os_cgroup_read) from a fake hierarchy in a temporary directory: the
   tightest of the group's and its ancestors' cpu.max (as CPUs, rounded up) and memory.max,
   "max" meaning none, no v2 entry meaning no limits; and retain's default under a memory
   limit (options_retain_for). */
#include "options.h"
#include "os.h"
#include "unit.h"

#include <sys/stat.h>

static char root[64];

/* Writes text to root/rel. */
static void put(const char *rel, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  FILE *f = fopen(path, "w");
  UCHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static void dir(const char *rel) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  UCHECK(mkdir(path, 0700) == 0);
}

int main(void) {
  strcpy(root, "/tmp/magpie-cgroup-XXXXXX");
  UCHECK(mkdtemp(root) != NULL);
  char proc[128], tree[128];
  snprintf(proc, sizeof proc, "%s/proc-cgroup", root);
  snprintf(tree, sizeof tree, "%s/fs", root);
  dir("fs");
  dir("fs/kube");
  dir("fs/kube/pod");
  put("proc-cgroup", "1:name=systemd:/elsewhere\n0::/kube/pod\n");
  put("fs/cpu.max", "max 100000\n");
  put("fs/kube/cpu.max", "250000 100000\n"); /* 2.5 CPUs: 3 */
  put("fs/kube/pod/cpu.max", "max 100000\n");
  put("fs/kube/memory.max", "1073741824\n");
  put("fs/kube/pod/memory.max", "536870912\n");
  os_cgroup_t got;
  os_cgroup_read(proc, tree, &got);
  UCHECK(got.cpus == 3 && got.memory == (uint64_t)512 << 20);

  put("fs/kube/pod/cpu.max", "50000 100000\n"); /* the group's own, tighter: half a CPU, 1 */
  put("fs/kube/pod/memory.max", "max\n");
  os_cgroup_read(proc, tree, &got);
  UCHECK(got.cpus == 1 && got.memory == (uint64_t)1 << 30);

  put("proc-cgroup", "4:memory:/kube/pod\n"); /* cgroup v1 only: no limits read */
  os_cgroup_read(proc, tree, &got);
  UCHECK(got.cpus == 0 && got.memory == 0);
  put("proc-cgroup", "0::/\n"); /* the hierarchy's root, as inside a container */
  os_cgroup_read(proc, tree, &got);
  UCHECK(got.cpus == 0 && got.memory == 0);
  put("fs/memory.max", "268435456\n");
  os_cgroup_read(proc, tree, &got);
  UCHECK(got.memory == (uint64_t)256 << 20);

  UCHECK(options_retain_for(0) == (size_t)256 << 20);
  UCHECK(options_retain_for((uint64_t)64 << 30) == (size_t)256 << 20);
  UCHECK(options_retain_for((uint64_t)512 << 20) == (size_t)64 << 20);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  UCHECK(system(cmd) == 0);
  return 0;
}
