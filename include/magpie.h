/*
 * magpie: an MT-hot memory allocator.
 *
 * Linking with -lmagpie (or preloading libmagpie.so) replaces malloc, free and the rest of the
 * glibc allocation API. This header adds what glibc has no name for: the allocator under its own
 * names (usable beside another malloc, e.g. in sanitizer builds), object caches with constructors
 * and destructors in the manner of umem_cache_create(3MALLOC), and statistics.
 */
#ifndef MAGPIE_H
#define MAGPIE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The malloc family under magpie's own names; same semantics as the standard functions. */
void *magpie_malloc(size_t size);
void magpie_free(void *ptr);
void *magpie_calloc(size_t nmemb, size_t size);
void *magpie_realloc(void *ptr, size_t size);
void *magpie_aligned_alloc(size_t alignment, size_t size);
int magpie_posix_memalign(void **out, size_t alignment, size_t size);
size_t magpie_usable_size(void *ptr);
/* Releases every free page magpie holds back to the operating system; returns bytes released. */
size_t magpie_trim(void);
/* Maps the pages of [ptr, ptr + len) now, their contents kept, so that the program's first
   touches cost no page faults; a range of tens of MiB or more is mapped by several threads at
   once. ptr must be the start of a live block magpie handed out and len at most its usable
   size. Returns 0, EINVAL for any other ptr or len (in MAGPIE_DEBUG mode a pointer that is no
   live block is also reported, as free reports it), EOPNOTSUPP where the kernel cannot populate
   (before Linux 5.14), or ENOMEM / EFAULT when memory ran short (some pages may be mapped). */
int magpie_populate(void *ptr, size_t len);

/*
 * Object caches. A cache hands out objects of one size and alignment. The constructor runs when
 * an object enters the cache (before it is first handed out), the destructor only when the cache
 * gives the object's memory back (reaping, trimming, destroy), so an object keeps its constructed
 * state across magpie_cache_free and the next magpie_cache_alloc.
 */
typedef struct magpie_cache magpie_cache_t;
/* Returns 0 on success; non-zero makes the allocation fail (NULL, errno ENOMEM). */
typedef int magpie_ctor_t(void *obj, void *arg, int flags);
typedef void magpie_dtor_t(void *obj, void *arg);

#define MAGPIE_DEFAULT 0x0 /* alloc: may return NULL on memory exhaustion */
#define MAGPIE_NOFAIL 0x1  /* alloc: never returns NULL (reports and aborts instead) */

magpie_cache_t *magpie_cache_create(const char *name, size_t size, size_t align,
                                    magpie_ctor_t *ctor, magpie_dtor_t *dtor, void *arg, int flags);
void *magpie_cache_alloc(magpie_cache_t *cache, int flags);
void magpie_cache_free(magpie_cache_t *cache, void *obj);
/* All objects must have been freed; remaining free objects are destructed. */
void magpie_cache_destroy(magpie_cache_t *cache);

/* Checks every cache's magazines and slabs and every arena (and, in MAGPIE_DEBUG mode, every
   block's redzone and every freed block's pattern). Returns 0 when all is well; a broken heap is
   reported, then magpie aborts unless MAGPIE_DEBUG asked to continue, in which case the count of
   errors is returned. */
int magpie_verify(void);

/* Statistics report on file descriptor fd: human-readable text, or JSON (docs/design.md,
 * "Statistics"). */
#define MAGPIE_STATS_TEXT 0
#define MAGPIE_STATS_JSON 1
int magpie_stats_write(int fd, int format);

#ifdef __cplusplus
}
#endif
#endif
