/* The library is built with -fvisibility=hidden; the public API is marked with MAGPIE_EXPORT. */
#ifndef MAGPIE_EXPORT_H
#define MAGPIE_EXPORT_H
#define MAGPIE_EXPORT __attribute__((visibility("default")))
#endif
