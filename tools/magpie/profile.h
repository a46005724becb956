/* profile: the heap profile of a running process, taken now (`magpie profile PID FILE`), and
 * the difference of two profiles (`magpie profile-diff OLD NEW`). */
#ifndef MAGPIE_TOOL_PROFILE_H
#define MAGPIE_TOOL_PROFILE_H

#include <stddef.h>

/* The request file a process running the library looks for at each reap: it holds the path to
 * write the profile to, and the process removes it once the files are written. */
#define PROFILE_REQUEST_PREFIX "/tmp/magpie-profile."

/* Makes path absolute (against the current directory) into out; 0, or -1 after reporting. */
int profile_absolute(const char *path, char *out, size_t cap);
/* The commands; argv holds their arguments (the command's name left out). */
int cmd_profile(int argc, char **argv);
int cmd_profile_diff(int argc, char **argv);

#endif
