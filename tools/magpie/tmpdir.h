/* tmpdir: the temporary directory the library writes its statistics into with --stats. Every
 * process running the library writes DIR/STATS_PREFIX<its pid> at exit; the tool reads its
 * direct child's file, counts the others (the program's own children) and removes the directory
 * before it exits. */
#ifndef MAGPIE_TOOL_TMPDIR_H
#define MAGPIE_TOOL_TMPDIR_H

#include <stddef.h>
#include <sys/types.h>

/* The library's stats files are named STATS_PREFIX<pid> inside the directory. */
#define STATS_PREFIX "stats."

/* Creates the directory, in $TMPDIR or /tmp; returns 0, or -1 after reporting why. */
int make_stats_dir(char *dir, size_t cap);
/* Counts the stats files in dir other than program's: those of the program's children. */
size_t count_other_stats(const char *dir, pid_t program);
/* Removes everything dir holds, then dir; warns when it cannot. */
void remove_stats_dir(const char *dir);

#endif
