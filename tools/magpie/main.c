/* magpie: the command-line front end. `magpie run [--stats] [--json] [--profile FILE] [--record
 * FILE] [--] PROGRAM ARGS...` runs PROGRAM with libmagpie.so preloaded and, with --stats,
 * reports what the allocator saw; `magpie stats PID` prints a running process's live statistics
 * (live, inspect); `magpie top PID` shows them refreshed, with rates (top); `magpie profile`,
 * `flame` and `profile-diff` take and read heap profiles. This file holds the usage text, the
 * argument parsing and the order of one run; the work is done by the modules below it, each
 * calling only further down:
 *   main -> top (the live view) -> live, report's number formats
 *   main -> run (fork, exec, signals, finding the library)
 *        -> plot (a record drawn as SVG) -> json
 *        -> report (text and JSON) -> stats (the library's stats file) -> json (the scanner)
 *        -> tmpdir (the directory the stats files go to)
 *      -> profile (a running process's profile; profile-diff), flame (the SVG) -> folded
 * and tool.h (exit statuses, error messages) beneath them all. The tool exits with PROGRAM's
 * status, like a shell; its own failures use the statuses listed in tool.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flame.h"
#include "inspect.h"
#include "plot.h"
#include "profile.h"
#include "report.h"
#include "run.h"
#include "tmpdir.h"
#include "tool.h"
#include "top.h"

static const char usage_text[] =
    "Usage: magpie run [--stats] [--json] [--profile FILE] [--record FILE [--interval MS]]\n"
    "                  [--] PROGRAM [ARGS...]\n"
    "       magpie stats [--json] PID\n"
    "       magpie top [--interval MS] [--batch N] [--sort KEY]... PID\n"
    "       magpie plot FILE [-o OUT.svg]\n"
    "       magpie profile [--timeout SEC] PID FILE\n"
    "       magpie flame FILE [-o OUT.svg] [--title TEXT]\n"
    "       magpie profile-diff [-n N] OLD NEW\n"
    "       magpie version\n"
    "       magpie --help\n"
    "\n"
    "magpie run starts PROGRAM with the magpie allocator (" LIBRARY_NAME ", found beside\n"
    "this executable or in its installed library directory) preloaded in place of the\n"
    "system malloc, waits for it, and exits with its exit status (128+N if signal N\n"
    "killed it).\n"
    "\n"
    "Options of run:\n"
    "  --stats     when PROGRAM ends, print a report on stderr: allocations, frees,\n"
    "              bytes requested, peak live bytes, peak RSS, peak mapped bytes and\n"
    "              the busiest size classes\n"
    "  --json      print the report as one JSON object instead (implies --stats)\n"
    "  --profile FILE  when PROGRAM ends, write its heap profile: FILE (gzipped pprof:\n"
    "              live heap and allocations; `go tool pprof -top FILE`) and\n"
    "              FILE.inuse.folded, FILE.alloc.folded (folded stacks, bytes)\n"
    "  --record FILE  while PROGRAM runs, append its live statistics to FILE, one JSON\n"
    "              object per line (docs/stats.md), every --interval MS (default 100)\n"
    "  --          end of options; what follows is PROGRAM and its arguments\n"
    "  -h, --help  show this help\n"
    "\n"
    "magpie plot draws a record (JSON Lines written by magpie run --record FILE) as an\n"
    "SVG picture: RSS, live, cached and mapped bytes against time, and the live bytes of\n"
    "the busiest size classes. OUT.svg defaults to FILE with .jsonl replaced by .svg.\n"
    "magpie profile asks the running process PID (under magpie, same user) to write its\n"
    "heap profile to FILE now, as --profile does at exit; it answers at its next reap.\n"
    "magpie flame draws a flame graph (SVG, default FILE.svg) of folded stacks (FILE.*.folded;\n"
    "a pprof FILE stands for FILE.inuse.folded). magpie profile-diff prints the stacks whose\n"
    "live bytes grew most from profile OLD to NEW (leak hunting).\n"
    "magpie stats PID prints the live statistics a running process with magpie\n"
    "published (it must be yours, or you root); --json prints one JSON object.\n"
    "\n"
    "magpie top PID shows that process's heap live, refreshed every --interval MS\n"
    "(default 1000): RSS, live, cached, mapped and huge-page bytes, totals with rates\n"
    "per second, the busiest caches and the most contended locks. Keys sort the\n"
    "caches (a allocs/s, f frees/s, l live, k cached, m misses/s, t depot trades/s,\n"
    "s size) or the locks (c contended/s, w wait, n acquisitions/s); q quits.\n"
    "--sort KEY sorts from the start; --batch N prints N refreshes as plain text\n"
    "(as does top when its output is not a terminal). Exit status: 0 when quit or\n"
    "done, 1 when the process exited, 125 when it has no magpie statistics.\n"
    "\n"
    "Environment:\n"
    "  MAGPIE_OPTIONS  allocator options (name=value,...), passed on to PROGRAM\n"
    "  LD_PRELOAD      kept; " LIBRARY_NAME " is put in front of it\n"
    "\n"
    "Exit status: PROGRAM's; 2 usage error; 125 magpie itself failed;\n"
    "126 PROGRAM could not be executed; 127 PROGRAM was not found.\n"
    "\n"
    "Example:\n"
    "  magpie run --stats -- python3 -c 'print(len([str(i) for i in range(10**6)]))'\n"
    "  magpie run --profile heap.pb.gz -- ./server && magpie flame heap.pb.gz -o heap.svg\n";

static void usage(FILE *out) {
  fputs(usage_text, out);
}

static int usage_error(const char *fmt, const char *what) __attribute__((format(printf, 1, 0)));
static int usage_error(const char *fmt, const char *what) {
  fputs("magpie: ", stderr);
  fprintf(stderr, fmt, what);
  fputs("\nTry 'magpie --help' for usage.\n", stderr);
  return EXIT_USAGE;
}

/* An interval in ms, 1 to 60000; -1 if s is not one. */
static int parse_ms(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  return *s && !*end && v >= 1 && v <= 60000 ? (int)v : -1;
}

static int cmd_run(int argc, char **argv) {
  int stats = 0, json = 0, interval = 100, i;
  const char *profile = NULL, *record = NULL;
  for (i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-' || a[1] == '\0') break;
    if (strcmp(a, "--stats") == 0) {
      stats = 1;
    } else if (strcmp(a, "--json") == 0) {
      stats = json = 1;
    } else if (strcmp(a, "--profile") == 0 && i + 1 < argc) {
      profile = argv[++i];
    } else if (strcmp(a, "--record") == 0 && i + 1 < argc) {
      record = argv[++i];
    } else if (strcmp(a, "--interval") == 0 && i + 1 < argc) {
      if ((interval = parse_ms(argv[++i])) < 0)
        return usage_error("--interval wants milliseconds (1 to 60000), not '%s'", argv[i]);
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      return usage_error("unknown option '%s' for run", a);
    }
  }
  if (i >= argc) return usage_error("%s", "run: no PROGRAM given");

  char lib[PATH_MAX], dir[PATH_MAX], profile_path[PATH_MAX];
  if (find_library(lib, sizeof lib) < 0) return EXIT_TOOL_FAILED;
  if (profile && profile_absolute(profile, profile_path, sizeof profile_path) < 0)
    return EXIT_TOOL_FAILED;
  if (stats && make_stats_dir(dir, sizeof dir) < 0) return EXIT_TOOL_FAILED;

  inspect_recorder_t rec;
  memset(&rec, 0, sizeof rec);
  char publish[32];
  snprintf(publish, sizeof publish, "publish_ms=%d", interval);
  run_watch_t watch = {publish, (unsigned)interval, inspect_record_tick, &rec};
  if (record) {
    if (!(rec.out = fopen(record, "w"))) {
      error("cannot write %s: %s", record, strerror(errno));
      if (stats) remove_stats_dir(dir);
      return EXIT_TOOL_FAILED;
    }
    clock_gettime(CLOCK_MONOTONIC, &rec.start);
  }

  run_result_t r;
  memset(&r, 0, sizeof r);
  r.program = argv[i];
  r.profile = profile ? profile_path : NULL;
  r.stats_json = json;
  int rc = run_program(argv + i, lib, stats ? dir : NULL, record ? &watch : NULL, &r);
  if (record) {
    live_close(rec.area);
    fclose(rec.out);
  }
  if (rc == 0 && r.exec_errno) {
    if (r.exec_errno == ENOENT)
      error("%s: program not found", r.program);
    else
      error("cannot run %s: %s", r.program, strerror(r.exec_errno));
  }
  if (rc == 0 && profile && !r.exec_errno && access(profile_path, R_OK) < 0)
    error("%s wrote no heap profile to %s (it ended without running exit handlers, or "
          "MAGPIE_OPTIONS has profile_rate=0)",
          r.program, profile_path);
  if (stats) {
    if (rc == 0) {
      r.children = count_other_stats(dir, r.pid);
      report_stats(&r, dir, json);
    }
    remove_stats_dir(dir);
  }
  if (record && rc == 0 && !json)
    fprintf(stderr, "magpie: %zu samples of the heap over time in %s; draw them: magpie plot %s\n",
            rec.lines, record, record);
  return rc < 0 ? EXIT_TOOL_FAILED : r.exit_status;
}

static int cmd_plot(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0) {
      if (++i == argc) return usage_error("%s", "plot: -o needs a file name");
      out = argv[i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return usage_error("unknown option '%s' for plot", argv[i]);
    } else if (in) {
      return usage_error("plot: more than one FILE ('%s')", argv[i]);
    } else {
      in = argv[i];
    }
  }
  if (!in) return usage_error("%s", "plot: no FILE given");
  return plot_record(in, out) == 0 ? 0 : EXIT_TOOL_FAILED;
}

static int cmd_stats(int argc, char **argv) {
  int json = 0;
  const char *pid_text = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (!pid_text && argv[i][0] != '-')
      pid_text = argv[i];
    else
      return usage_error("stats: unexpected '%s'", argv[i]);
  }
  char *end;
  long pid = pid_text ? strtol(pid_text, &end, 10) : 0;
  if (!pid_text || *end || pid <= 0) return usage_error("%s", "stats: give a process id");
  live_t *l;
  live_snapshot_t s;
  char why[512];
  int rc = live_open((pid_t)pid, &l, why, sizeof why);
  if (rc == LIVE_OK) {
    rc = live_read(l, &s, why, sizeof why);
    live_close(l);
  }
  if (rc != LIVE_OK) {
    error("%s", why);
    return EXIT_TOOL_FAILED;
  }
  if (json)
    inspect_json(stdout, &s);
  else
    inspect_text(stdout, &s);
  live_snapshot_free(&s);
  return 0;
}

static int cmd_top(int argc, char **argv) {
  top_options_t o;
  memset(&o, 0, sizeof o);
  o.interval_ms = 1000;
  const char *pid_text = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--interval") == 0 && i + 1 < argc) {
      int ms = parse_ms(argv[++i]);
      if (ms < 0)
        return usage_error("--interval wants milliseconds (1 to 60000), not '%s'", argv[i]);
      o.interval_ms = (unsigned)ms;
    } else if (strcmp(a, "--batch") == 0 && i + 1 < argc) {
      char *end;
      o.batch = strtol(argv[++i], &end, 10);
      if (*end || o.batch < 1)
        return usage_error("--batch wants a count of refreshes, not '%s'", argv[i]);
    } else if (strcmp(a, "--sort") == 0 && i + 1 < argc) {
      const char *k = argv[++i];
      if (k[0] && !k[1] && top_sort_key_ok(k[0], 1))
        o.class_key = k[0];
      else if (k[0] && !k[1] && top_sort_key_ok(k[0], 0))
        o.lock_key = k[0];
      else
        return usage_error("--sort wants one of the keys a f l k m t s c w n, not '%s'", k);
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (!pid_text && a[0] != '-') {
      pid_text = a;
    } else {
      return usage_error("top: unexpected '%s'", a);
    }
  }
  char *end;
  long pid = pid_text ? strtol(pid_text, &end, 10) : 0;
  if (!pid_text || *end || pid <= 0) return usage_error("%s", "top: give a process id");
  o.pid = (pid_t)pid;
  return top_run(&o);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("magpie %s\n", MAGPIE_VERSION);
    return 0;
  }
  if (strcmp(cmd, "run") == 0) return cmd_run(argc - 2, argv + 2);
  if (strcmp(cmd, "plot") == 0) return cmd_plot(argc - 2, argv + 2);
  if (strcmp(cmd, "profile") == 0) return cmd_profile(argc - 2, argv + 2);
  if (strcmp(cmd, "profile-diff") == 0) return cmd_profile_diff(argc - 2, argv + 2);
  if (strcmp(cmd, "flame") == 0) return cmd_flame(argc - 2, argv + 2);
  if (strcmp(cmd, "stats") == 0) return cmd_stats(argc - 2, argv + 2);
  if (strcmp(cmd, "top") == 0) return cmd_top(argc - 2, argv + 2);
  if (cmd[0] == '-') return usage_error("unknown option '%s'", cmd);
  return usage_error("unknown command '%s'", cmd);
}
