/*
 * prof_write: the heap profile's files, written from inside the process without allocating:
 * PATH, a gzipped pprof protobuf holding both profiles, and PATH.inuse.folded and
 * PATH.alloc.folded, folded stacks ("outer;...;allocating_function bytes" a line).
 *
 * Theory
 *   1. A snapshot of the stacks' figures is taken under prof_lock; everything after runs
 *      without it: symbolising takes the dynamic loader's lock (prof.c, theory 3).
 *   2. pprof (github.com/google/pprof, proto/profile.proto): four sample types, as in Go's heap
 *      profiles: alloc_objects, alloc_space, inuse_objects, inuse_space (the default). One
 *      Location per distinct return address, one Function per run of addresses that resolve
 *      to one name (addresses are sorted, so a function's addresses are adjacent), named in the
 *      process (symbolize.c), so every Mapping says has_functions and pprof needs no binary.
 *      Mappings are the executable ones of /proc/self/maps. Strings are appended to
 *      string_table as they are first needed: protobuf concatenates a repeated field's
 *      occurrences, wherever they stand in the message.
 *   3. The encoding is written here: varints, length-delimited fields (a submessage is built
 *      in a small buffer first, for its length), packed repeated fields. The gzip container
 *      (RFC 1952) holds the bytes in stored deflate blocks (RFC 1951, BTYPE 00), so no
 *      compressor is needed; CRC-32 and the size close it.
 *   4. Memory comes from os_map and goes back at the end: the writer runs at exit, or on a
 *      request in the reaper (or a slow path, where there is no reaper thread).
 */
#include "prof.h"
#include "options.h"
#include "os.h"
#include "report.h"

#include <string.h>

#define PROF_NAME_MAX 256
#define PROF_MAPS_MAX ((size_t)4 << 20) /* /proc/self/maps read at most */
#define PROF_REQUEST_DIR "/tmp/magpie-profile."

/* ---- a growing byte buffer of mapped memory ---- */

typedef struct pbuf {
  char *p;
  size_t len, cap;
  bool failed;
} pbuf_t;

static void pb_bytes(pbuf_t *b, const void *data, size_t n) {
  if (b->failed) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : (size_t)64 << 10;
    while (cap < b->len + n)
      cap *= 2;
    char *p = b->p ? os_remap(b->p, b->cap, cap) : os_map(cap);
    if (!p) {
      b->failed = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
}

static void pb_free(pbuf_t *b) {
  if (b->p) os_unmap(b->p, b->cap);
}

/* ---- protobuf ---- */

static void pb_varint(pbuf_t *b, uint64_t v) {
  unsigned char out[10];
  size_t n = 0;
  do {
    out[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  pb_bytes(b, out, n);
}

static void pb_int(pbuf_t *b, unsigned field, uint64_t v) {
  pb_varint(b, (uint64_t)field << 3); /* wire type 0 */
  pb_varint(b, v);
}

static void pb_len(pbuf_t *b, unsigned field, const void *data, size_t n) {
  pb_varint(b, (uint64_t)field << 3 | 2);
  pb_varint(b, n);
  pb_bytes(b, data, n);
}

/* A submessage under construction, in a buffer on the stack. */
typedef struct pmsg {
  pbuf_t b;
  char space[1024];
} pmsg_t;

static void pm_start(pmsg_t *m) {
  m->b = (pbuf_t){m->space, 0, sizeof m->space, false};
}

static void pm_end(pbuf_t *out, unsigned field, pmsg_t *m) {
  pb_len(out, field, m->space, m->b.len);
}

/* The string table: each string appended as it is first needed; returns its index. */
typedef struct pstrings {
  pbuf_t *out;
  uint64_t count;
} pstrings_t;

static uint64_t ps_add(pstrings_t *s, const char *text) {
  pb_len(s->out, 6, text, strlen(text));
  return s->count++;
}

/* ---- gzip of stored blocks ---- */

static void crc_table(uint32_t table[256]) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
}

static bool gzip_write(const char *path, const char *data, size_t len) {
  int fd = os_open_write(path);
  if (fd < 0) return false;
  static const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}; /* 3: Unix */
  os_write_all(fd, (const char *)head, sizeof head);
  uint32_t table[256], crc = 0xffffffffu;
  crc_table(table);
  size_t done = 0;
  do {
    size_t n = len - done > 65535 ? 65535 : len - done;
    unsigned char block[5] = {done + n == len, (unsigned char)n, (unsigned char)(n >> 8),
                              (unsigned char)~n, (unsigned char)(~n >> 8)};
    os_write_all(fd, (const char *)block, sizeof block);
    os_write_all(fd, data + done, n);
    for (size_t i = done; i < done + n; i++)
      crc = table[(crc ^ (unsigned char)data[i]) & 0xff] ^ (crc >> 8);
    done += n;
  } while (done < len);
  crc ^= 0xffffffffu;
  unsigned char tail[8];
  for (int i = 0; i < 4; i++) {
    tail[i] = (unsigned char)(crc >> (8 * i));
    tail[4 + i] = (unsigned char)((uint32_t)len >> (8 * i));
  }
  os_write_all(fd, (const char *)tail, sizeof tail);
  os_close(fd);
  return true;
}

/* ---- the profile's pieces ---- */

/* What a snapshot resolves to: the distinct addresses, sorted, each with its name. */
typedef struct prof_frames {
  uintptr_t *addr;
  uint32_t *name_at; /* offset of each address's name in names */
  char *names;
  const char **object; /* the object file each address lies in, or NULL */
  size_t n;
} prof_frames_t;

static void sort_addresses(uintptr_t *a, size_t n) { /* Shell sort: no allocation */
  for (size_t gap = n / 2; gap > 0; gap = gap == 2 ? 1 : gap * 5 / 11)
    for (size_t i = gap; i < n; i++) {
      uintptr_t v = a[i];
      size_t j = i;
      for (; j >= gap && a[j - gap] > v; j -= gap)
        a[j] = a[j - gap];
      a[j] = v;
    }
}

static size_t frame_index(const prof_frames_t *f, uintptr_t ip) {
  size_t lo = 0, hi = f->n;
  while (lo + 1 < hi) {
    size_t mid = (lo + hi) / 2;
    if (f->addr[mid] <= ip)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Collects, sorts and names the frames of rows; false without memory. */
static bool frames_resolve(prof_frames_t *f, const prof_row_t *rows, size_t nrows, size_t *bytes) {
  size_t total = 0;
  for (size_t i = 0; i < nrows; i++)
    total += (size_t)rows[i].stack->depth;
  size_t cap = total ? total : 1;
  *bytes = cap * (sizeof *f->addr + sizeof *f->name_at + sizeof *f->object + PROF_NAME_MAX);
  char *mem = os_map(*bytes);
  if (!mem) return false;
  f->addr = (uintptr_t *)mem;
  f->object = (const char **)(f->addr + cap);
  f->name_at = (uint32_t *)(f->object + cap);
  f->names = (char *)(f->name_at + cap);
  size_t n = 0;
  for (size_t i = 0; i < nrows; i++)
    for (int k = 0; k < rows[i].stack->depth; k++)
      f->addr[n++] = rows[i].stack->frames[k];
  sort_addresses(f->addr, n);
  size_t unique = 0;
  for (size_t i = 0; i < n; i++)
    if (unique == 0 || f->addr[unique - 1] != f->addr[i]) f->addr[unique++] = f->addr[i];
  f->n = unique;
  symfile_t sym = {.map = NULL};
  size_t used = 0;
  for (size_t i = 0; i < unique; i++) {
    char *name = f->names + used;
    if (!symbolize_ip(&sym, f->addr[i], name, PROF_NAME_MAX, &f->object[i]) && !f->object[i])
      report_format_hex(name, f->addr[i]);
    for (char *c = name; *c; c++)
      if (*c == ';' || *c == '\n') *c = ':'; /* the folded format's separators */
    f->name_at[i] = (uint32_t)used;
    used += strlen(name) + 1;
  }
  symbolize_end(&sym);
  return true;
}

static const char *frame_name(const prof_frames_t *f, uintptr_t ip) {
  return f->names + f->name_at[frame_index(f, ip)];
}

static uint64_t prof_round(double v) {
  return v > 0.5 ? (uint64_t)(v + 0.5) : 0;
}

/* ---- folded stacks ---- */

static bool folded_write(const char *path, const char *suffix, const prof_row_t *rows, size_t nrows,
                         const prof_frames_t *f, bool live) {
  char file[512];
  size_t n = strlen(path), m = strlen(suffix);
  if (n + m >= sizeof file) return false;
  memcpy(file, path, n);
  memcpy(file + n, suffix, m + 1);
  int fd = os_open_write(file);
  if (fd < 0) return false;
  report_buf_t b = {.to_fd = true, .fd = fd};
  for (size_t i = 0; i < nrows; i++) {
    uint64_t v = prof_round(live ? rows[i].live_bytes : rows[i].alloc_bytes);
    if (!v) continue;
    const prof_stack_t *s = rows[i].stack;
    for (int k = s->depth - 1; k >= 0; k--) {
      report_str(&b, frame_name(f, s->frames[k]));
      report_str(&b, k ? ";" : " ");
    }
    if (s->depth == 0) report_str(&b, "[unknown] ");
    report_dec(&b, v);
    report_str(&b, "\n");
  }
  report_flush(&b);
  os_close(fd);
  return true;
}

/* ---- pprof ---- */

/* The executable mappings of /proc/self/maps, written as Mapping messages (ids from 1, in
   address order); each address's mapping id goes to map_of (0: none). */
static void pprof_mappings(pbuf_t *out, pstrings_t *strs, const prof_frames_t *f,
                           uint32_t *map_of) {
  char *maps = os_map(PROF_MAPS_MAX);
  if (!maps) return;
  if (os_read_file("/proc/self/maps", maps, PROF_MAPS_MAX) <= 0) maps[0] = '\0';
  uint32_t id = 0;
  size_t next = 0; /* the first address not yet placed */
  for (char *line = maps; *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = '\0';
    uint64_t lo = 0, hi = 0, off = 0;
    const char *s = line;
    for (; *s && *s != '-'; s++)
      lo = lo * 16 + (uint64_t)(*s <= '9' ? *s - '0' : (*s | 32) - 'a' + 10);
    for (s += *s == '-'; *s && *s != ' '; s++)
      hi = hi * 16 + (uint64_t)(*s <= '9' ? *s - '0' : (*s | 32) - 'a' + 10);
    bool exec = s[0] && s[1] && s[2] && s[3] == 'x';
    s += *s ? 5 : 0; /* " rwxp" */
    for (s++; *s && *s != ' '; s++)
      off = off * 16 + (uint64_t)(*s <= '9' ? *s - '0' : (*s | 32) - 'a' + 10);
    for (int field = 0; field < 2 && *s; field++) /* device, inode */
      for (s++; *s && *s != ' '; s++) {
      }
    while (*s == ' ')
      s++;
    if (exec) {
      pmsg_t m;
      pm_start(&m);
      pb_int(&m.b, 1, ++id);
      pb_int(&m.b, 2, lo);
      pb_int(&m.b, 3, hi);
      pb_int(&m.b, 4, off);
      if (*s) pb_int(&m.b, 5, ps_add(strs, s));
      pb_int(&m.b, 7, 1); /* has_functions */
      pm_end(out, 3, &m);
      while (next < f->n && f->addr[next] < lo)
        next++;
      for (; next < f->n && f->addr[next] < hi; next++)
        map_of[next] = id;
    }
    line = end ? end + 1 : line + strlen(line);
  }
  os_unmap(maps, PROF_MAPS_MAX);
}

static bool pprof_write(const char *path, const prof_row_t *rows, size_t nrows,
                        const prof_frames_t *f) {
  pbuf_t out = {NULL, 0, 0, false};
  pstrings_t strs = {&out, 0};
  uint32_t *map_of = os_map((f->n + 1) * sizeof *map_of);
  if (!map_of) return false;
  ps_add(&strs, "");
  static const char *const types[4][2] = {{"alloc_objects", "count"},
                                          {"alloc_space", "bytes"},
                                          {"inuse_objects", "count"},
                                          {"inuse_space", "bytes"}};
  uint64_t inuse_space = 0, bytes_unit = 0;
  for (int i = 0; i < 4; i++) {
    pmsg_t m;
    pm_start(&m);
    uint64_t type = ps_add(&strs, types[i][0]), unit = ps_add(&strs, types[i][1]);
    pb_int(&m.b, 1, type);
    pb_int(&m.b, 2, unit);
    pm_end(&out, 1, &m);
    if (i == 3) inuse_space = type;
    if (i == 1) bytes_unit = unit;
  }
  pprof_mappings(&out, &strs, f, map_of);
  uint64_t functions = 0;
  const char *previous = NULL;
  for (size_t i = 0; i < f->n; i++) {
    const char *name = f->names + f->name_at[i];
    if (!previous || strcmp(previous, name) != 0) {
      pmsg_t m;
      pm_start(&m);
      uint64_t id = ++functions, name_index = ps_add(&strs, name);
      pb_int(&m.b, 1, id);
      pb_int(&m.b, 2, name_index);
      pb_int(&m.b, 3, name_index);
      if (f->object[i]) pb_int(&m.b, 4, ps_add(&strs, f->object[i]));
      pm_end(&out, 5, &m);
      previous = name;
    }
    pmsg_t loc, line;
    pm_start(&loc);
    pm_start(&line);
    pb_int(&loc.b, 1, i + 1);
    if (map_of[i]) pb_int(&loc.b, 2, map_of[i]);
    pb_int(&loc.b, 3, f->addr[i] - 1); /* inside the call, as pprof expects of a caller */
    pb_int(&line.b, 1, functions);
    pm_end(&loc.b, 4, &line);
    pm_end(&out, 4, &loc);
  }
  for (size_t i = 0; i < nrows; i++) {
    const prof_stack_t *s = rows[i].stack;
    uint64_t v[4] = {prof_round(rows[i].alloc_objects), prof_round(rows[i].alloc_bytes),
                     prof_round(rows[i].live_objects), prof_round(rows[i].live_bytes)};
    if (!v[0] && !v[1]) continue;
    pmsg_t m, ids, vals;
    pm_start(&m);
    pm_start(&ids);
    pm_start(&vals);
    for (int k = 0; k < s->depth; k++)
      pb_varint(&ids.b, frame_index(f, s->frames[k]) + 1);
    for (int k = 0; k < 4; k++)
      pb_varint(&vals.b, v[k]);
    pm_end(&m.b, 1, &ids);
    pm_end(&m.b, 2, &vals);
    pm_end(&out, 2, &m);
  }
  pmsg_t period;
  pm_start(&period);
  pb_int(&period.b, 1, ps_add(&strs, "space"));
  pb_int(&period.b, 2, bytes_unit);
  pm_end(&out, 11, &period);
  pb_int(&out, 12, opt.profile_rate);
  pb_int(&out, 14, inuse_space);
  os_unmap(map_of, (f->n + 1) * sizeof *map_of);
  bool ok = !out.failed && gzip_write(path, out.p, out.len);
  pb_free(&out);
  return ok;
}

/* ---- writing, on request and at exit ---- */

bool prof_write(const char *path) {
  size_t max = prof_snapshot(NULL, 0) + 64; /* stacks listed meanwhile are left out */
  size_t rows_bytes = max * sizeof(prof_row_t), frames_bytes = 0;
  prof_row_t *rows = os_map(rows_bytes);
  if (!rows) return false;
  os_touch(rows, rows_bytes); /* filled under the profiler's lock: no first write there */
  size_t n = prof_snapshot(rows, max);
  if (n > max) n = max;
  prof_frames_t f;
  bool ok = frames_resolve(&f, rows, n, &frames_bytes);
  if (ok) {
    ok = folded_write(path, ".inuse.folded", rows, n, &f, true);
    ok = folded_write(path, ".alloc.folded", rows, n, &f, false) && ok;
    ok = pprof_write(path, rows, n, &f) && ok;
    os_unmap(f.addr, frames_bytes);
  }
  os_unmap(rows, rows_bytes);
  return ok;
}

void prof_at_exit(void) {
  if (!opt.profile_file[0] || !opt.profile_rate) return;
  char path[sizeof opt.profile_file + REPORT_DEC_MAX];
  report_expand_pid(path, sizeof path, opt.profile_file);
  prof_write_begin(true);
  if (!prof_write(path)) report_warning("cannot write the heap profile to ", path);
  prof_write_end();
}

void prof_poll_request(void) {
  if (!opt.profile_rate) return;
  char request[sizeof PROF_REQUEST_DIR + REPORT_DEC_MAX], path[PROF_NAME_MAX * 2];
  memcpy(request, PROF_REQUEST_DIR, sizeof PROF_REQUEST_DIR - 1);
  report_format_dec(request + sizeof PROF_REQUEST_DIR - 1, (uint64_t)os_getpid());
  int fd = os_open_private(request);
  if (fd < 0) return;
  ssize_t n = os_read(fd, path, sizeof path - 1);
  os_close(fd);
  if (n <= 0 || !prof_write_begin(false)) return;
  while (n > 0 && (path[n - 1] == '\n' || path[n - 1] == '\0'))
    n--;
  path[n] = '\0';
  if (n == 0 || !prof_write(path)) report_warning("cannot write the heap profile to ", path);
  prof_write_end();
  os_unlink(request); /* after the files: the requester waits for it to go */
}
