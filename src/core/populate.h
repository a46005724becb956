/* populate: maps the pages of a big range by several threads at once. See populate.c. */
#ifndef MAGPIE_POPULATE_H
#define MAGPIE_POPULATE_H

#include <stddef.h>

/* Maps every page of [p, p + len) now, contents kept: 0, or an errno value (os_populate's). */
int populate_range(void *p, size_t len);

#endif
