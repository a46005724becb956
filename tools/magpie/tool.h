/* tool: what every part of the magpie command shares: its exit statuses, the library's file
 * name and the way it reports an error. The exit statuses follow env(1) and the shells, so a
 * script tells the tool's own failures apart from the program's: 2 usage error, 125 the tool
 * failed, 126 the program could not be executed, 127 the program was not found; otherwise the
 * tool exits with the program's status, or 128+N if signal N killed it. */
#ifndef MAGPIE_TOOL_H
#define MAGPIE_TOOL_H

#define EXIT_USAGE 2
#define EXIT_TOOL_FAILED 125
#define EXIT_CANNOT_EXEC 126
#define EXIT_NOT_FOUND 127

/* The allocator library under its SONAME (libmagpie.so.MAJOR; MAGPIE_SOVERSION comes from the
 * build), found beside the magpie executable in the build directory or, installed, in the library
 * directory (MAGPIE_LIBDIR_FROM_BINDIR, relative to the executable's directory). */
#define LIBRARY_NAME "libmagpie.so." MAGPIE_SOVERSION

/* Prints "magpie: " and the formatted message, then a newline, on stderr. */
void error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
