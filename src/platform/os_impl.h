/*
 * os_impl: what the platform's os_*.c files share with one another. Private to them: the layers
 * above include os.h, the platform's contract, and nothing else of these files.
 */
#ifndef MAGPIE_OS_IMPL_H
#define MAGPIE_OS_IMPL_H

#include <stdint.h>

/* os_machine.c */
extern int os_init_pid; /* the process that ran os_init */
/* The decimal number at *s, *s moved past its digits. */
unsigned long os_parse_ulong(const char **s);

/* os_file.c: opens path close-on-exec with the raw system call (no cancellation point). */
int os_open(const char *path, int flags, int mode);

/* os_proc.c: "/proc/PID/FILE" into path (48 bytes are enough), "/proc/self/FILE" for pid 0. */
void os_proc_path(char *path, int pid, const char *file);

/* os_track.c: a range magpie mapped, or unmapped (the record of magpie's mappings). */
void os_track_add(uintptr_t lo, uintptr_t hi);
void os_track_remove(uintptr_t lo, uintptr_t hi);

#endif
