/* report: what the tool prints on stderr with --stats (text) or --json once the program ends. */
#ifndef MAGPIE_TOOL_REPORT_H
#define MAGPIE_TOOL_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "run.h"

#include <stddef.h>
#include <stdint.h>

/* Reads the program's statistics from stats_dir and reports them, as text or, when json is set,
 * as one JSON object; with no statistics to read it says why, in plain words. */
void report_stats(const run_result_t *r, const char *stats_dir, int json);
/* Writes a byte count in binary units ("512 B", "1.5 KiB", "3.2 MiB") into buf; returns buf. */
char *fmt_bytes(uint64_t v, char *buf, size_t cap);

/* Writes v with thousands separators ("1,234,567") into buf; returns buf. */
char *fmt_count(uint64_t v, char *buf, size_t cap);
/* Writes a byte count in binary units ("512 B", "1.5 KiB", "3.2 MiB") into buf; returns buf. */
char *fmt_bytes(uint64_t v, char *buf, size_t cap);

#endif
