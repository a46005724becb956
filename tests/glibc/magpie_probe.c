/*
 * Linked into each of glibc's malloc tests (tests/glibc): before the test's main, checks that
 * magpie is the malloc the test calls, so that a test run without magpie fails instead of
 * passing on glibc's malloc. MAGPIE_PROBE=interposed is for a test that defines its own malloc
 * (tst-interpose-thread): there magpie must be loaded in the process, and the program's own
 * malloc must win over it. On failure it says why on stderr and exits with status 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The file name of the object that defines addr, or "". */
static const char *probe_object_of(void *addr) {
  Dl_info info;
  if (addr == NULL || dladdr(addr, &info) == 0 || info.dli_fname == NULL) return "";
  return info.dli_fname;
}

static void probe_fail(const char *why) {
  const char *preload = getenv("LD_PRELOAD");
  fprintf(stderr, "magpie_probe: %s (LD_PRELOAD=%s)\n", why, preload ? preload : "(unset)");
  exit(1);
}

__attribute__((constructor)) static void magpie_probe(void) {
  void *anchor = dlsym(RTLD_DEFAULT, "magpie_malloc");
  if (anchor == NULL) probe_fail("libmagpie is not loaded in this process");
  const char *magpie = probe_object_of(anchor);
  const char *malloc_from = probe_object_of(dlsym(RTLD_DEFAULT, "malloc"));
  const char *mode = getenv("MAGPIE_PROBE");
  if (mode != NULL && strcmp(mode, "interposed") == 0) {
    if (strcmp(malloc_from, magpie) == 0)
      probe_fail("the program's own malloc does not take precedence over magpie's");
  } else if (strcmp(malloc_from, magpie) != 0) {
    probe_fail("malloc is not magpie's");
  }
}
