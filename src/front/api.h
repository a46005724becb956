/* api: the malloc family's semantics under magpie's own names. See api.c. */
#ifndef MAGPIE_API_H
#define MAGPIE_API_H

#include <stddef.h>
#include <malloc.h>
#include <stdio.h>

void *api_memalign(size_t align, size_t size); /* align: a power of two; NULL + errno */
void *api_reallocarray(void *p, size_t n, size_t size);
void *api_valloc(size_t size);
void *api_pvalloc(size_t size);
void api_free_sized(void *p, size_t size, size_t align); /* free_sized, free_aligned_sized */
int api_trim(size_t pad);
void api_malloc_stats(void);
int api_malloc_info(int options, FILE *fp);
struct mallinfo2 api_mallinfo2(void);

#endif
