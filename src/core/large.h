/* large: blocks above the largest size class, straight from the heap arena. See large.c. */
#ifndef MAGPIE_LARGE_H
#define MAGPIE_LARGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void *large_alloc(size_t size, size_t align, bool zero); /* NULL with errno ENOMEM */
void large_free(void *p, uintptr_t entry);               /* entry: p's page-map entry */
size_t large_size(uintptr_t entry);
/* Resizes in place or by remapping: the block's address afterwards, or NULL (unchanged). */
void *large_resize(void *p, uintptr_t entry, size_t size);
size_t large_live_bytes(void);
/* The most large blocks, and bytes in them, that were live at once. */
void large_peaks(size_t *blocks, size_t *bytes);

#endif
