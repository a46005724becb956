/*
 * dlopen of a library whose constructor allocates (ctor_lib.c), three times over: the blocks
 * made inside dlopen are intact when it returns and the program can free them with its own
 * free, and the library's destructor, inside dlclose, frees the rest and allocates again. With
 * magpie preloaded the library's malloc and the program's are the same one; a block freed into
 * another allocator, or corrupted, fails a check or crashes.
 *   dlopen LIBRARY
 */
#include "blocks.h"

#include <dlfcn.h>
#include <malloc.h>

#define CYCLES 3

int main(int argc, char **argv) {
  api_begin("dlopen");
  REQUIRE(argc == 2);
  for (int cycle = 0; cycle < CYCLES; cycle++) {
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) NOTE("  dlopen: %s\n", dlerror());
    REQUIRE(lib != NULL);
    void **(*blocks_of)(int *) = (void **(*)(int *))dlsym(lib, "ctor_lib_blocks");
    void (*report_to)(unsigned long *, unsigned long *) =
        (void (*)(unsigned long *, unsigned long *))dlsym(lib, "ctor_lib_report");
    REQUIRE(blocks_of != NULL && report_to != NULL);
    int count = 0;
    void **blocks = blocks_of(&count);
    REQUIRE(count > 0);
    unsigned long bad = 0, freed_here = 0;
    for (int i = 0; i < count; i++) {
      REQUIRE(blocks[i] != NULL);
      bad += !block_ok(blocks[i]);
      CHECK(malloc_usable_size(blocks[i]) >= ((block_head_t *)blocks[i])->size);
      if (i % 2 == 0) { /* freed by the program; the odd ones by the library's destructor */
        free(blocks[i]);
        blocks[i] = NULL;
        freed_here++;
      }
    }
    CHECK(bad == 0);
    unsigned long bad_in_fini = ~0ul, freed_in_fini = 0;
    report_to(&bad_in_fini, &freed_in_fini);
    REQUIRE(dlclose(lib) == 0);
    if (bad_in_fini != 0 || freed_in_fini + freed_here != (unsigned long)count)
      NOTE("  cycle %d: the destructor found %lu bad blocks, freed %lu of %lu\n", cycle,
           bad_in_fini, freed_in_fini, (unsigned long)count - freed_here);
    CHECK(bad_in_fini == 0); /* ~0 if the destructor never ran */
    CHECK(freed_in_fini + freed_here == (unsigned long)count);
  }
  return api_end();
}
