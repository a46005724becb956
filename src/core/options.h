/* options: MAGPIE_OPTIONS, read once at start without allocating. See options.c. */
#ifndef MAGPIE_OPTIONS_H
#define MAGPIE_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#define OPT_STATS_OFF 0
#define OPT_STATS_TEXT 1
#define OPT_STATS_JSON 2
enum { OPT_HUGE_AUTO, OPT_HUGE_ALWAYS, OPT_HUGE_NEVER, OPT_HUGE_HUGETLB, OPT_HUGE_WORDS };
extern const char *const opt_hugepages_words[OPT_HUGE_WORDS]; /* the option's values, by number */
#define OPT_MAG_ROUNDS_MAX 256 /* the largest first magazine (cache.c) */

typedef struct options {
  size_t stats;           /* report at exit: OPT_STATS_OFF, _TEXT or _JSON */
  char stats_file[256];   /* report path ("%p" becomes the pid); empty = stderr */
  size_t mag_rounds;      /* initial magazine size for every class; 0 = per-class default */
  size_t reap_ms;         /* how often depots and arenas give back what was not needed */
  size_t sweep_ms;        /* a class no thread allocates sends its blocks home after this; 0 off */
  size_t publish_ms;      /* how often the reap publishes the live statistics; 0: reap_ms */
  size_t retain;          /* free bytes an arena keeps mapped (dirty) between reaps */
  size_t large_own;       /* blocks of at least this size get their own mapping */
  size_t calloc_populate; /* calloc maps fresh pages of blocks up to this size at once */
  size_t sample;          /* about one small allocation in this many gets a guard page; 0 off */
  size_t reaper; /* 1: a background thread reaps once the heap is big, in a program that runs
                    threads; 2: in any program; 0: never (caches.c) */
  size_t percpu; /* 1: per-CPU magazines once threads outnumber CPUs; 0: never; 2: as 1, and
                    on an rseq area of magpie's own also where glibc's is turned off */
  size_t percpu_threads;  /* threads that keep their own magazines; 0: twice the CPUs */
  size_t hugepages;       /* OPT_HUGE_*: how slab huge pages are backed (hugepage.c) */
  size_t hugepages_min;   /* auto: slab heap bytes from which huge pages are used */
  size_t purge_batch;     /* ranges purged in one process_madvise call (os.h); 0: madvise each */
  size_t profile_rate;    /* heap profiler: about one sample per this many bytes; 0 off */
  char profile_file[256]; /* heap profile written at exit ("%p": the pid); empty = none */
  size_t inject;          /* test build (platform/inject.h): seed of forced races; 0 off */
} options_t;

extern options_t opt;

/* Parses "name=value,..." into opt; warns once per unknown name or bad value. */
void options_parse(const char *text);
/* Parses MAGPIE_OPTIONS from the environment (environ; getenv may not be usable yet). */
void options_init(void);
/* retain's default under a cgroup memory limit (bytes; 0: none): an eighth of it, at most
   256 MiB. Free pages the heap keeps are charged to the cgroup like live ones, and the
   kernel's OOM killer acts at the limit. */
size_t options_retain_for(uint64_t memory_limit);
/* The value of environment variable name, read from environ without allocating; NULL if unset,
   and in secure-execution mode, where it is ignored with a warning (options.c theory 4). */
const char *options_getenv(const char *name);

#endif
