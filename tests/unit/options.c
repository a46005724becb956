/* MAGPIE_OPTIONS parsing: values and suffixes, words, one warning per unknown name or bad
   value (read back from stderr through a pipe), the default kept, and one per value clamped
   to its option's range. */
#include "options.h"
#include "unit.h"

#include <string.h>
#include <unistd.h>

static char warnings[4096];

/* Parses text with stderr captured into `warnings`. */
static void parse_capturing(const char *text) {
  int fds[2], saved = dup(2);
  UCHECK(pipe(fds) == 0 && saved >= 0);
  dup2(fds[1], 2);
  options_parse(text);
  dup2(saved, 2);
  close(fds[1]);
  close(saved);
  ssize_t n = read(fds[0], warnings, sizeof warnings - 1);
  warnings[n > 0 ? n : 0] = '\0';
  close(fds[0]);
}

int main(void) {
  parse_capturing("retain=3m,reap_ms=250,mag_rounds=64,stats=json,stats_file=/tmp/x.%p");
  UCHECK(warnings[0] == '\0');
  UCHECK(opt.retain == (size_t)3 << 20 && opt.reap_ms == 250 && opt.mag_rounds == 64);
  UCHECK(opt.stats == OPT_STATS_JSON && strcmp(opt.stats_file, "/tmp/x.%p") == 0);
  parse_capturing("large_own=2G,stats=text");
  UCHECK(opt.large_own == (size_t)2 << 30 && opt.stats == OPT_STATS_TEXT);

  parse_capturing("frobnicate=1,retain=1k");
  UCHECK(strstr(warnings, "unknown option") && strstr(warnings, "frobnicate"));
  UCHECK(opt.retain == 1024);

  parse_capturing("reap_ms=fast,stats=loud,retain=12q,mag_rounds=");
  UCHECK(strstr(warnings, "reap_ms=fast") && strstr(warnings, "stats=loud"));
  UCHECK(strstr(warnings, "retain=12q") && strstr(warnings, "mag_rounds="));
  UCHECK(opt.reap_ms == 250 && opt.retain == 1024 && opt.stats == OPT_STATS_TEXT);

  parse_capturing("retain=99999999999999999999999"); /* overflow is a bad value */
  UCHECK(strstr(warnings, "bad value") && opt.retain == 1024);
  /* A number outside its option's range is clamped, and the warning names the value used. */
  parse_capturing("mag_rounds=1000,reap_ms=0");
  UCHECK(opt.mag_rounds == 256 && opt.reap_ms == 1);
  UCHECK(strstr(warnings, "out of range") && strstr(warnings, "(set to 256): mag_rounds"));
  UCHECK(strstr(warnings, "(set to 1): reap_ms"));
  parse_capturing("mag_rounds=256,reap_ms=1"); /* the bounds themselves are quiet */
  UCHECK(warnings[0] == '\0');
  parse_capturing(",,"); /* empty entries are ignored quietly */
  UCHECK(warnings[0] == '\0');
  printf("options: ok\n");
  return 0;
}
