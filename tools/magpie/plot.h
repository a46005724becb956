/* plot: `magpie plot`, a record of the heap over time drawn as an SVG picture. See plot.c. */
#ifndef MAGPIE_TOOL_PLOT_H
#define MAGPIE_TOOL_PLOT_H

/* Draws the record at path (JSON Lines from `magpie run --record`) into out_path, or, when it is
 * NULL, beside it (".jsonl" replaced by ".svg"), and prints the picture's path on stdout;
 * returns 0, or -1 after an error message. */
int plot_record(const char *path, const char *out_path);

#endif
