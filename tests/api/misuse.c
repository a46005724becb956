/*
 * Commits one allocator misuse, named by argv[1], after printing on stdout the address it is
 * about to pass to free ("misuse: <kind> <address as %p>"). Run by expect_abort, which checks
 * that the allocator reported it on stderr with that address and aborted.
 *
 *   double-free     free(p) twice, p = malloc(48)
 *   free-stack      free of a stack address
 *   free-global     free of a global array
 *   free-interior   free(p + 8), p = malloc(64)
 *   hollow-double-free
 *                   free(p) again after malloc_trim gave p's page back (p one of 4096 freed
 *                   blocks of 64 bytes), then more blocks of its size
 *   hollow-write    a write to p instead of the free: reported when the slab takes p's page
 *                   back into use
 *   sized-double-delete
 *                   C++'s sized operator delete(p, 40) twice, p = operator new(40) (found with
 *                   dlsym: this C program loads the C++ runtime, as a C++ program does, so
 *                   that magpie trusts the sizes, but names no operator), after a warm-up of
 *                   such pairs
 *   sized-delete-interior
 *                   operator delete(p + 8, 32), p = operator new(64)
 *   sized-delete-mismatch
 *                   operator delete(p, 32), p = operator new(48) at an address where a 32-byte
 *                   block could start (magpie's sized delete then takes it for one), then
 *                   malloc_trim: reported when p reaches the 32-byte class's slabs
 *   realloc-freed   realloc(p, 100) after free(p), p = malloc(48)
 *   realloc-interior
 *                   realloc(p + 8, 100), p = malloc(64)
 *   realloc-stack   realloc of a stack address
 *   usable-freed    malloc_usable_size(p) after free(p), p = malloc(48)
 *
 * Reaching the end means the misuse went unnoticed: exit status 3.
 */
#include "check.h"

#include <dlfcn.h>
#include <malloc.h>

#define UNNOTICED_STATUS 3

static char global_block[256] __attribute__((aligned(64)));

static void announce(const char *kind, const void *addr) {
  printf("misuse: %s %p\n", kind, addr);
  fflush(stdout);
}

/* The call a misuse makes with p: realloc, malloc_usable_size or free, by kind's first word. */
static void misuse_call(const char *kind, void *p) {
  if (strncmp(kind, "realloc-", 8) == 0)
    free(realloc(opaque_ptr(p), opaque_size(100)));
  else if (strncmp(kind, "usable-", 7) == 0)
    printf("usable size %zu\n", malloc_usable_size(opaque_ptr(p)));
  else
    free(opaque_ptr(p));
}

/* Frees (or writes) a block whose page magpie gave back inside its slab, then uses the heap
   on. */
static void hollow_misuse(const char *kind, int write) {
  enum { N = 4096, SIZE = 64, PAGE = 4096 };
  static char *blocks[N];
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(opaque_size(SIZE));
    if (blocks[i] == NULL) exit(2);
    memset(blocks[i], 1, SIZE);
  }
  for (int i = 0; i < N; i++)
    if (i % 512) free(blocks[i]);
  /* stale: a freed block on a page that holds PAGE / SIZE of the freed blocks, so nothing else */
  char *stale = NULL;
  for (int i = 1; i < N && !stale; i++) {
    int same = 0;
    for (int j = 0; j < N; j++)
      same += j % 512 && (uintptr_t)blocks[j] / PAGE == (uintptr_t)blocks[i] / PAGE;
    if (i % 512 && same == PAGE / SIZE) stale = blocks[i];
  }
  if (!stale) exit(2);
  malloc_trim(0);
  announce(kind, stale);
  if (write)
    memset(opaque_ptr(stale), 3, SIZE);
  else
    free(opaque_ptr(stale));
  for (int i = 0; i < N; i++)
    memset(malloc(opaque_size(SIZE)), 2, SIZE);
}

/* A double or interior C++ sized delete, through the operators the process resolves. */
static void sized_delete_misuse(const char *kind, int interior) {
  void *(*op_new)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
  void (*op_delete)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
  if (op_new == NULL || op_delete == NULL) exit(2);
  for (int i = 0; i < 1000; i++) /* the magazines are loaded, the fast path taken */
    op_delete(op_new(opaque_size(40)), 40);
  char *p = op_new(opaque_size(interior ? 64 : 40));
  if (((uintptr_t)p & 4095) == 0) /* magpie checks a page-aligned one in the page map */
    p = op_new(opaque_size(interior ? 64 : 40));
  memset(p, 1, interior ? 64 : 40);
  if (strcmp(kind, "sized-delete-mismatch") == 0) {
    char *blocks[256];
    int odd = -1;
    for (int i = 0; i < 256; i++) {
      blocks[i] = op_new(opaque_size(48));
      uintptr_t a = (uintptr_t)blocks[i];
      if (odd < 0 && a % 32 == 0 && a % 4096 != 0) odd = i;
    }
    if (odd < 0) exit(2);
    announce(kind, blocks[odd]);
    for (int i = 0; i < 256; i++)
      op_delete(opaque_ptr(blocks[i]), i == odd ? 32 : 48);
    malloc_trim(0);
    return;
  }
  if (interior) {
    announce(kind, p + 8);
    op_delete(opaque_ptr(p + 8), 32);
  } else {
    announce(kind, p);
    op_delete(p, 40);
    op_delete(opaque_ptr(p), 40);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr,
            "usage: %s "
            "double-free|free-stack|free-global|free-interior|hollow-double-free|hollow-write|"
            "sized-double-delete|sized-delete-interior|sized-delete-mismatch|realloc-freed|"
            "realloc-interior|realloc-stack|usable-freed\n",
            argv[0]);
    return 2;
  }
  const char *kind = argv[1];
  /* Some ordinary traffic first, so the allocator is initialised and the heap is not empty. */
  void *warm[32];
  for (int i = 0; i < 32; i++)
    warm[i] = malloc(opaque_size(24 + (size_t)i * 8));
  for (int i = 0; i < 32; i += 2)
    free(warm[i]);

  if (strcmp(kind, "double-free") == 0 || strcmp(kind, "realloc-freed") == 0 ||
      strcmp(kind, "usable-freed") == 0) {
    void *p = malloc(opaque_size(48));
    if (p == NULL) return 2;
    memset(p, 1, 48);
    announce(kind, p);
    free(p);
    misuse_call(kind, p);
  } else if (strcmp(kind, "free-stack") == 0 || strcmp(kind, "realloc-stack") == 0) {
    char stack_block[128] __attribute__((aligned(16)));
    memset(stack_block, 1, sizeof stack_block);
    void *p = opaque_ptr(stack_block);
    announce(kind, p);
    misuse_call(kind, p);
    stack_block[0] = 2; /* keeps the array alive across the call */
    opaque_ptr(stack_block);
  } else if (strcmp(kind, "free-global") == 0) {
    void *p = opaque_ptr(global_block);
    announce(kind, p);
    free(p);
  } else if (strcmp(kind, "free-interior") == 0 || strcmp(kind, "realloc-interior") == 0) {
    char *p = malloc(opaque_size(64));
    if (p == NULL) return 2;
    memset(p, 1, 64);
    void *interior = opaque_ptr(p + 8);
    announce(kind, interior);
    misuse_call(kind, interior);
  } else if (strncmp(kind, "sized-", 6) == 0) {
    sized_delete_misuse(kind, strcmp(kind, "sized-delete-interior") == 0);
  } else if (strncmp(kind, "hollow-", 7) == 0) {
    hollow_misuse(kind, strcmp(kind, "hollow-write") == 0);
  } else {
    fprintf(stderr, "misuse: unknown kind %s\n", kind);
    return 2;
  }
  fprintf(stderr, "misuse: %s went unnoticed\n", kind);
  return UNNOTICED_STATUS;
}
