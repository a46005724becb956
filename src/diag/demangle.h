/* demangle: C++ names for the stack reports, without the heap. See demangle.c. */
#ifndef MAGPIE_DEMANGLE_H
#define MAGPIE_DEMANGLE_H

#include <stdbool.h>
#include <stddef.h>

/* Demangles an Itanium C++ name (the common forms) into out (cap bytes, NUL-terminated); false
   when it cannot, out then holding nothing to use. */
bool demangle_itanium(const char *mangled, char *out, size_t cap);

#endif
