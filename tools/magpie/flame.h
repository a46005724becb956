/* flame: `magpie flame FILE [-o OUT.svg]`, a flame graph of folded stacks as an SVG file. */
#ifndef MAGPIE_TOOL_FLAME_H
#define MAGPIE_TOOL_FLAME_H

/* argv holds the command's arguments (its name left out). */
int cmd_flame(int argc, char **argv);

#endif
