/* report: what the tool prints on stderr with --stats (text) or --json once the program ends. */
#ifndef MAGPIE_TOOL_REPORT_H
#define MAGPIE_TOOL_REPORT_H

#include "run.h"

/* Reads the program's statistics from stats_dir and reports them, as text or, when json is set,
 * as one JSON object; with no statistics to read it says why, in plain words. */
void report_stats(const run_result_t *r, const char *stats_dir, int json);

#endif
