/* top: the live view of `magpie top PID` (top.h).
 *
 * Each refresh copies the process's statistics area (live_read). A copy whose `published` count
 * moved becomes the current snapshot and the one before it the previous; every rate is
 * (current - previous) / (their publish_ns apart), so rates are per second of the process's own
 * publishing whatever the refresh interval, and a refresh that finds no new snapshot shows the
 * last rates again. Rows are matched across snapshots by (kind, index) for caches and by name
 * for locks; a row new since the previous snapshot counts from 0, and a counter that went down
 * gives a rate of 0. Until two snapshots are in hand the rates print "-" and the tables sort by
 * the counts since the process started.
 *
 * A frame is built as lines of plain ASCII text (frame_t), then written either as it is (batch:
 * frames one after another, like top -b) or over the previous frame: cursor home, each line cut
 * to the terminal's width and ended by erase-to-end-of-line, erase below. Interactive, the
 * terminal is switched to its alternate screen with the cursor hidden and the keyboard read key
 * by key, and given back on every way out: 'q', SIGINT, SIGTERM, SIGHUP (the handlers only set
 * flags that the loop reads), the process exiting, an error. SIGWINCH makes the loop read the
 * size again (TIOCGWINSZ) and redraw. */
#include "top.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "live.h"
#include "report.h"
#include "tool.h"

#define BATCH_CLASSES 12 /* table rows in plain-text frames */
#define BATCH_LOCKS 8
#define FRAME_LINES 200 /* at most this many lines of a frame are kept */
#define LINE_CAP 256    /* bytes of a line, its NUL included */
#define FIXED_LINES 10  /* lines of an interactive frame that are not table rows */
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* The sort keys: which table each sorts, and the column's name in the frame. */
static const struct {
  char key;
  int class;
  const char *label;
} sort_keys[] = {
    {'a', 1, "allocs/s"},       {'f', 1, "frees/s"},     {'l', 1, "live bytes"},
    {'k', 1, "cached"},         {'m', 1, "misses/s"},    {'t', 1, "depot trades/s"},
    {'s', 1, "size"},           {'c', 0, "contended/s"}, {'w', 0, "wait ms/s"},
    {'n', 0, "acquisitions/s"},
};

int top_sort_key_ok(char key, int class) {
  for (size_t i = 0; i < sizeof sort_keys / sizeof sort_keys[0]; i++)
    if (sort_keys[i].key == key && sort_keys[i].class == class) return 1;
  return 0;
}

static const char *sort_label(char key) {
  for (size_t i = 0; i < sizeof sort_keys / sizeof sort_keys[0]; i++)
    if (sort_keys[i].key == key) return sort_keys[i].label;
  return "?";
}

/* One cache's row as shown: rates per second (counts since start while rates are unknown). */
typedef struct {
  const magpie_area_class_t *c;
  double allocs, frees, misses, trades;
  uint64_t cached_bytes;
} class_view_t;

/* One lock's row as shown. */
typedef struct {
  const magpie_area_lock_t *l;
  double acquisitions, contended, wait_ms;
} lock_view_t;

typedef struct {
  int n;
  char line[FRAME_LINES][LINE_CAP];
} frame_t;

typedef struct {
  top_options_t o;
  live_t *area;
  live_snapshot_t cur, prev;
  int have_cur, have_prev; /* have_prev: rates are known */
  char comm[64];           /* the process's name */
  frame_t frame;
} top_t;

static volatile sig_atomic_t stop_signal, resized;

static void on_signal(int sig) {
  if (sig == SIGWINCH)
    resized = 1;
  else
    stop_signal = sig;
}

static void add_line(frame_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_line(frame_t *f, const char *fmt, ...) {
  if (f->n == FRAME_LINES) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->line[f->n++], LINE_CAP, fmt, ap);
  va_end(ap);
}

/* A rate in at most 6 characters ("0", "2.5", "812", "12.3k", "4.1M"); "-" when unknown. */
static char *fmt_rate(double v, int known, char *buf, size_t cap) {
  if (!known)
    snprintf(buf, cap, "-");
  else if (v < 9.95)
    snprintf(buf, cap, v == 0 ? "%.0f" : "%.1f", v);
  else if (v < 9999.5)
    snprintf(buf, cap, "%.0f", v);
  else if (v < 999.95e3)
    snprintf(buf, cap, "%.1fk", v / 1e3);
  else if (v < 999.95e6)
    snprintf(buf, cap, "%.1fM", v / 1e6);
  else
    snprintf(buf, cap, "%.1fG", v / 1e9);
  return buf;
}

/* Whether pid still runs (its /proc/PID/stat exists, and it is not a zombie); fills comm. */
static int process_alive(pid_t pid, char *comm, size_t cap) {
  char path[64], stat[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = '\0';
  char *open = strchr(stat, '('), *close = strrchr(stat, ')');
  if (!open || !close || close < open || close[1] != ' ') return 0;
  snprintf(comm, cap, "%.*s", (int)(close - open - 1), open + 1);
  return close[2] != 'Z' && close[2] != 'X' && close[2] != 'x';
}

/* Takes a new copy of the area; keeps it when the process published since the last one. */
static int refresh(top_t *t, char *why, size_t cap) {
  live_snapshot_t s;
  int rc = live_read(t->area, &s, why, cap);
  if (rc == LIVE_BUSY && t->have_cur) return LIVE_OK; /* the last copy again */
  if (rc != LIVE_OK) return rc;
  if (t->have_cur && s.head.published == t->cur.head.published) {
    live_snapshot_free(&s);
    return LIVE_OK;
  }
  if (t->have_prev) live_snapshot_free(&t->prev);
  t->prev = t->cur;
  t->have_prev = t->have_cur;
  t->cur = s;
  t->have_cur = 1;
  return LIVE_OK;
}

/* The rate of a counter: its growth per second, or its value while rates are unknown. */
static double rate(uint64_t now, uint64_t before, double seconds) {
  return now > before ? (double)(now - before) / seconds : 0;
}

static double seconds_apart(const top_t *t) {
  if (!t->have_prev) return 1;
  double s = (double)(t->cur.head.publish_ns - t->prev.head.publish_ns) / 1e9;
  return s > 1e-6 ? s : 1e-6;
}

static const magpie_area_class_t *prev_class(const top_t *t, uint32_t i) {
  static const magpie_area_class_t none;
  const magpie_area_class_t *c = &t->cur.classes[i], *p = t->prev.classes;
  uint32_t n = t->have_prev ? t->prev.head.class_count : 0;
  if (i < n && p[i].kind == c->kind && p[i].index == c->index) return &p[i];
  for (uint32_t j = 0; j < n; j++)
    if (p[j].kind == c->kind && p[j].index == c->index) return &p[j];
  return &none;
}

static const magpie_area_lock_t *prev_lock(const top_t *t, uint32_t i) {
  static const magpie_area_lock_t none;
  const magpie_area_lock_t *l = &t->cur.locks[i], *p = t->prev.locks;
  uint32_t n = t->have_prev ? t->prev.head.lock_count : 0;
  if (i < n && strncmp(p[i].name, l->name, sizeof l->name) == 0) return &p[i];
  for (uint32_t j = 0; j < n; j++)
    if (strncmp(p[j].name, l->name, sizeof l->name) == 0) return &p[j];
  return &none;
}

static char sort_key; /* qsort's comparators read the key here */

static double class_sort_value(const class_view_t *v) {
  switch (sort_key) {
  case 'f':
    return v->frees;
  case 'l':
    return (double)v->c->live_bytes;
  case 'k':
    return (double)v->cached_bytes;
  case 'm':
    return v->misses;
  case 't':
    return v->trades;
  case 's':
    return (double)v->c->size;
  default:
    return v->allocs;
  }
}

/* qsort's order for the largest first. */
static int descending(double x, double y) {
  return (x < y) - (x > y);
}

/* By the key, then by misses and live bytes, so equal rows keep a stable order. */
static int by_class_key(const void *a, const void *b) {
  const class_view_t *x = a, *y = b;
  int order = descending(class_sort_value(x), class_sort_value(y));
  if (!order) order = descending(x->misses, y->misses);
  return order ? order : descending((double)x->c->live_bytes, (double)y->c->live_bytes);
}

static double lock_sort_value(const lock_view_t *v) {
  switch (sort_key) {
  case 'w':
    return v->wait_ms;
  case 'n':
    return v->acquisitions;
  default:
    return v->contended;
  }
}

/* By the key, then by wait and acquisitions. */
static int by_lock_key(const void *a, const void *b) {
  const lock_view_t *x = a, *y = b;
  int order = descending(lock_sort_value(x), lock_sort_value(y));
  if (!order) order = descending(x->wait_ms, y->wait_ms);
  return order ? order : descending(x->acquisitions, y->acquisitions);
}

/* A cache's free objects in bytes, (mags + depot) x size, held at 2^64 - 1 where it overflows. */
static uint64_t cached_bytes(const magpie_area_class_t *c) {
  uint64_t objects = c->cached_mags + c->cached_depot, bytes;
  if (objects < c->cached_mags || __builtin_mul_overflow(objects, c->size, &bytes))
    return UINT64_MAX;
  return bytes;
}

/* The caches with anything to show, sorted; returns how many (views has class_count places). */
static uint32_t class_views(const top_t *t, class_view_t *views) {
  double dt = seconds_apart(t);
  uint32_t n = 0;
  for (uint32_t i = 0; i < t->cur.head.class_count; i++) {
    const magpie_area_class_t *c = &t->cur.classes[i], *p = prev_class(t, i);
    if (!c->allocs && !c->slab_objects_out && !c->misses) continue;
    views[n++] = (class_view_t){c,
                                rate(c->allocs, p->allocs, dt),
                                rate(c->frees, p->frees, dt),
                                rate(c->misses, p->misses, dt),
                                rate(c->depot_exchanges, p->depot_exchanges, dt),
                                cached_bytes(c)};
  }
  sort_key = t->o.class_key;
  qsort(views, n, sizeof *views, by_class_key);
  return n;
}

/* The locks taken since the previous snapshot (since start, while rates are unknown), sorted;
   returns how many. */
static uint32_t lock_views(const top_t *t, lock_view_t *views, double *wait_ms) {
  double dt = seconds_apart(t);
  uint32_t n = 0;
  *wait_ms = 0;
  for (uint32_t i = 0; i < t->cur.head.lock_count; i++) {
    const magpie_area_lock_t *l = &t->cur.locks[i], *p = prev_lock(t, i);
    if (!l->acquisitions || (t->have_prev && l->acquisitions == p->acquisitions)) continue;
    views[n] =
        (lock_view_t){l, rate(l->acquisitions, p->acquisitions, dt),
                      rate(l->contended, p->contended, dt), rate(l->wait_ns, p->wait_ns, dt) / 1e6};
    *wait_ms += views[n++].wait_ms;
  }
  sort_key = t->o.lock_key;
  qsort(views, n, sizeof *views, by_lock_key);
  return n;
}

static void add_header(top_t *t, double wait_ms) {
  const magpie_area_t *h = &t->cur.head, *p = t->have_prev ? &t->prev.head : NULL;
  static const magpie_area_t none;
  if (!p) p = &none;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  double age = ((double)now.tv_sec * 1e9 + (double)now.tv_nsec - (double)h->publish_ns) / 1e9;
  add_line(&t->frame,
           "magpie top - pid %d (%s) - %" PRIu64 " threads - snapshot %" PRIu64
           ", %.1f s old - every %.1f s",
           (int)t->o.pid, t->comm, h->threads_live, h->published, age < 0 ? 0 : age,
           t->o.interval_ms / 1000.0);
  char rss[32], live[32], cached[32], mapped[32], huge[32];
  add_line(&t->frame, "memory: RSS %s   live %s   cached %s   mapped %s   huge pages %s (%.1f%%)",
           fmt_bytes(h->rss_bytes, rss, sizeof rss), fmt_bytes(h->live_bytes, live, sizeof live),
           fmt_bytes(h->cached_bytes, cached, sizeof cached),
           fmt_bytes(h->mapped_bytes, mapped, sizeof mapped),
           fmt_bytes(h->huge_bytes, huge, sizeof huge),
           h->rss_bytes ? 100.0 * (double)h->huge_bytes / (double)h->rss_bytes : 0.0);
  double dt = seconds_apart(t);
  int known = t->have_prev;
  char a[32], ar[32], f[32], fr[32], m[32], mr[32], w[32];
  add_line(&t->frame,
           "totals: allocs %s (%s/s)   frees %s (%s/s)   misses %s (%s/s)   "
           "lock waits %s ms/s",
           fmt_count(h->allocs, a, sizeof a),
           fmt_rate(rate(h->allocs, p->allocs, dt), known, ar, sizeof ar),
           fmt_count(h->frees, f, sizeof f),
           fmt_rate(rate(h->frees, p->frees, dt), known, fr, sizeof fr),
           fmt_count(h->misses, m, sizeof m),
           fmt_rate(rate(h->misses, p->misses, dt), known, mr, sizeof mr),
           known ? (snprintf(w, sizeof w, "%.2f", wait_ms), w) : "-");
}

static void add_class_row(top_t *t, const class_view_t *v) {
  const magpie_area_class_t *c = v->c;
  int known = t->have_prev;
  char al[32], fr[32], live[32], cached[32], mi[32], tr[32], fill[32], name[48];
  if (c->slab_objects)
    snprintf(fill, sizeof fill, "%.0f%%",
             100.0 * (double)c->slab_objects_out / (double)c->slab_objects);
  else
    snprintf(fill, sizeof fill, "-");
  if (c->kind == 0)
    snprintf(name, sizeof name, "class %" PRIu64, c->index);
  else
    snprintf(name, sizeof name, "cache %.32s", c->name);
  add_line(&t->frame, "%8" PRIu64 " %9s %9s %10s %10s %9s %9s %6" PRIu64 " %5s  %s", c->size,
           fmt_rate(v->allocs, known, al, sizeof al), fmt_rate(v->frees, known, fr, sizeof fr),
           fmt_bytes(c->live_bytes, live, sizeof live),
           fmt_bytes(v->cached_bytes, cached, sizeof cached),
           fmt_rate(v->misses, known, mi, sizeof mi), fmt_rate(v->trades, known, tr, sizeof tr),
           c->slabs, fill, name);
}

static void add_lock_row(top_t *t, const lock_view_t *v) {
  int known = t->have_prev;
  char acq[32], con[32], wait[32];
  if (known)
    snprintf(wait, sizeof wait, "%.2f", v->wait_ms);
  else
    snprintf(wait, sizeof wait, "-");
  add_line(&t->frame, "%14s %12s %10s  %.32s", fmt_rate(v->acquisitions, known, acq, sizeof acq),
           fmt_rate(v->contended, known, con, sizeof con), wait, v->l->name);
}

/* Builds the frame; rows < 0: the batch table sizes, else the terminal's height. */
static int build_frame(top_t *t, int rows) {
  class_view_t *cv = malloc(sizeof *cv * (t->cur.head.class_count + 1));
  lock_view_t *lv = malloc(sizeof *lv * (t->cur.head.lock_count + 1));
  if (!cv || !lv) {
    free(cv);
    free(lv);
    return -1;
  }
  double wait_ms;
  uint32_t nc = class_views(t, cv), nl = lock_views(t, lv, &wait_ms);
  uint32_t show_c = MIN(nc, BATCH_CLASSES), show_l = MIN(nl, BATCH_LOCKS);
  if (rows >= 0) { /* the rows left: up to a third to the locks, the rest to the caches */
    uint32_t avail = rows > FIXED_LINES ? (uint32_t)rows - FIXED_LINES : 0;
    show_l = MIN(nl, MIN(MAX(avail / 3, 1), avail));
    show_c = MIN(nc, avail - show_l);
    show_l = MIN(nl, avail - show_c);
  }
  t->frame.n = 0;
  add_header(t, wait_ms);
  add_line(&t->frame, "%s", "");
  add_line(&t->frame, "CACHES by %s (%u of %u active)", sort_label(t->o.class_key), show_c, nc);
  add_line(&t->frame, "%8s %9s %9s %10s %10s %9s %9s %6s %5s  %s", "SIZE", "ALLOCS/S", "FREES/S",
           "LIVE", "CACHED", "MISSES/S", "TRADES/S", "SLABS", "FILL", "NAME");
  for (uint32_t i = 0; i < show_c; i++)
    add_class_row(t, &cv[i]);
  add_line(&t->frame, "%s", "");
  add_line(&t->frame, "LOCKS by %s (%u of %u in use)", sort_label(t->o.lock_key), show_l, nl);
  add_line(&t->frame, "%14s %12s %10s  %s", "ACQUISITIONS/S", "CONTENDED/S", "WAIT MS/S", "LOCK");
  for (uint32_t i = 0; i < show_l; i++)
    add_lock_row(t, &lv[i]);
  if (rows >= 0)
    add_line(&t->frame, "keys: a allocs f frees l live k cached m misses t trades s size | "
                        "c contended w wait n acquisitions | q quit");
  free(cv);
  free(lv);
  return 0;
}

static void print_plain(const frame_t *f) {
  for (int i = 0; i < f->n; i++)
    puts(f->line[i]);
  putchar('\n');
  fflush(stdout);
}

/* Draws the frame over the last one, each line cut one short of the width (a line that fills
   the last column would leave the cursor pending a wrap, where erase-to-end clears that
   column). */
static void print_screen(const frame_t *f, int width, int height) {
  size_t cap = (size_t)FRAME_LINES * (LINE_CAP + 8) + 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) return;
  n += (size_t)snprintf(buf + n, cap - n, "\033[H");
  for (int i = 0; i < f->n && i < height; i++) {
    int len = (int)strlen(f->line[i]);
    if (len > width - 1) len = width > 1 ? width - 1 : 0;
    n += (size_t)snprintf(buf + n, cap - n, "%.*s\033[K%s", len, f->line[i],
                          i + 1 < f->n && i + 1 < height ? "\r\n" : "");
  }
  n += (size_t)snprintf(buf + n, cap - n, "\033[J");
  for (size_t done = 0; done < n;) {
    ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  free(buf);
}

/* The terminal as it was, and what was changed of it. */
static struct termios saved_termios;
static int termios_changed, screen_changed;

static void terminal_enter(void) {
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_termios) == 0) {
    struct termios raw = saved_termios;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    termios_changed = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout); /* alternate screen, cursor hidden */
  fflush(stdout);
  screen_changed = 1;
}

static void terminal_leave(void) {
  if (screen_changed) {
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    screen_changed = 0;
  }
  if (termios_changed) {
    tcsetattr(STDIN_FILENO, TCSANOW, &saved_termios);
    termios_changed = 0;
  }
}

static void terminal_size(int *width, int *height) {
  struct winsize ws;
  *width = 80;
  *height = 24;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    *width = ws.ws_col;
    *height = ws.ws_row;
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Reads the keys typed; returns 1 when one of them quits. Sort keys take effect at once. */
static int read_keys(top_t *t) {
  char keys[64];
  ssize_t n = read(STDIN_FILENO, keys, sizeof keys);
  for (ssize_t i = 0; i < n; i++) {
    if (keys[i] == 'q' || keys[i] == 'Q') return 1;
    if (top_sort_key_ok(keys[i], 1)) t->o.class_key = keys[i];
    if (top_sort_key_ok(keys[i], 0)) t->o.lock_key = keys[i];
  }
  return 0;
}

/* One refresh: the process still runs, and its area reads. Returns 0, or the exit status after
   saying why. */
static int step(top_t *t) {
  char why[512];
  if (!process_alive(t->o.pid, t->comm, sizeof t->comm)) {
    terminal_leave();
    error("process %d exited", (int)t->o.pid);
    return 1;
  }
  if (refresh(t, why, sizeof why) != LIVE_OK) {
    terminal_leave();
    error("%s", why);
    return EXIT_TOOL_FAILED;
  }
  return 0;
}

static int run_batch(top_t *t) {
  for (long i = 0; t->o.batch == 0 || i < t->o.batch; i++) {
    if (i) {
      struct timespec ts = {t->o.interval_ms / 1000, (long)(t->o.interval_ms % 1000) * 1000000};
      nanosleep(&ts, NULL);
    }
    int rc = step(t);
    if (rc) return rc;
    if (build_frame(t, -1) < 0) return EXIT_TOOL_FAILED;
    print_plain(&t->frame);
  }
  return 0;
}

static int run_interactive(top_t *t) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal; /* no SA_RESTART: poll returns at once */
  sigemptyset(&sa.sa_mask);
  const int signals[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
    sigaction(signals[i], &sa, NULL);
  terminal_enter();
  int width, height, rc = 0, keys = termios_changed;
  terminal_size(&width, &height);
  double next = now_ms();
  while (!stop_signal) {
    int redraw = 0;
    if (now_ms() >= next) {
      if ((rc = step(t)) != 0) break;
      next += t->o.interval_ms;
      if (next < now_ms()) next = now_ms() + t->o.interval_ms;
      redraw = 1;
    }
    if (resized) {
      resized = 0;
      terminal_size(&width, &height);
      redraw = 1;
    }
    if (redraw) {
      if (build_frame(t, height) < 0) {
        rc = EXIT_TOOL_FAILED;
        break;
      }
      print_screen(&t->frame, width, height);
    }
    struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
    double wait = next - now_ms();
    int ready = poll(keys ? &pfd : NULL, keys ? 1 : 0, wait > 0 ? (int)wait + 1 : 0);
    if (ready > 0 && (pfd.revents & POLLIN)) {
      char class_key = t->o.class_key, lock_key = t->o.lock_key;
      if (read_keys(t)) break;
      if ((class_key != t->o.class_key || lock_key != t->o.lock_key) && build_frame(t, height) == 0)
        print_screen(&t->frame, width, height);
    }
  }
  terminal_leave();
  return rc;
}

int top_run(const top_options_t *o) {
  top_t *t = calloc(1, sizeof *t);
  if (!t) {
    error("out of memory");
    return EXIT_TOOL_FAILED;
  }
  t->o = *o;
  if (!t->o.class_key) t->o.class_key = 'a';
  if (!t->o.lock_key) t->o.lock_key = 'c';
  char why[512];
  int rc = live_open(o->pid, &t->area, why, sizeof why);
  if (rc != LIVE_OK) {
    error("%s", why);
    free(t);
    return EXIT_TOOL_FAILED;
  }
  if (o->batch || !isatty(STDOUT_FILENO))
    rc = run_batch(t);
  else
    rc = run_interactive(t);
  if (t->have_cur) live_snapshot_free(&t->cur);
  if (t->have_prev) live_snapshot_free(&t->prev);
  live_close(t->area);
  free(t);
  return rc;
}
