/*
 * Runs a misuse program and checks the allocator's error report:
 *
 *   expect_abort PROGRAM KIND WORD...
 *
 * runs `PROGRAM KIND` with stdout and stderr captured, and succeeds when
 * - the program was killed by SIGABRT (not another signal, not a normal exit);
 * - its stdout has the line "misuse: KIND ADDRESS" it prints before the misuse;
 * - its stderr contains ADDRESS, exactly as %p printed it;
 * - its stderr contains every WORD (case-insensitive), e.g. "double free", and none of the
 *   words given as !WORD (a report that hedges between kinds does not name the kind).
 * The child runs without core dumps and is killed after CHILD_TIMEOUT_S seconds (a deadlock in
 * the report path fails the test instead of hanging it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_TIMEOUT_S 20
#define MAX_OUTPUT 65536

static char *read_stream(FILE *fp) {
  static char empty[1];
  char *text = malloc(MAX_OUTPUT + 1);
  if (text == NULL) return empty;
  rewind(fp);
  size_t len = fread(text, 1, MAX_OUTPUT, fp);
  text[len] = '\0';
  return text;
}

/* True when text contains address as a whole token: "0x1230" does not contain "0x123". */
static int mentions_address(const char *text, const char *address) {
  size_t len = strlen(address);
  for (const char *at = strcasestr(text, address); at != NULL; at = strcasestr(at + 1, address)) {
    char before = at == text ? ' ' : at[-1], after = at[len];
    int joined_before = (before >= '0' && before <= '9') || (before >= 'a' && before <= 'z') ||
                        (before >= 'A' && before <= 'Z');
    int joined_after = (after >= '0' && after <= '9') || (after >= 'a' && after <= 'f') ||
                       (after >= 'A' && after <= 'F');
    if (!joined_before && !joined_after) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PROGRAM KIND [WORD | !WORD]...\n", argv[0]);
    return 2;
  }
  const char *program = argv[1], *kind = argv[2];
  FILE *out = tmpfile(), *err = tmpfile();
  if (out == NULL || err == NULL) {
    perror("expect_abort: tmpfile");
    return 2;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("expect_abort: fork");
    return 2;
  }
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    dup2(fileno(out), 1);
    dup2(fileno(err), 2);
    char *child_argv[] = {(char *)program, (char *)kind, NULL};
    execv(program, child_argv);
    fprintf(stderr, "expect_abort: exec %s: %s\n", program, strerror(errno));
    _exit(127);
  }
  int status = 0;
  struct timespec tick = {0, 10 * 1000 * 1000};
  int waited_ticks = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      perror("expect_abort: waitpid");
      return 2;
    }
    if (++waited_ticks > CHILD_TIMEOUT_S * 100) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fprintf(stderr, "expect_abort: %s %s did not finish in %d s (deadlock?)\n", program, kind,
              CHILD_TIMEOUT_S);
      return 1;
    }
    nanosleep(&tick, NULL);
  }
  char *out_text = read_stream(out), *err_text = read_stream(err);
  fprintf(stderr, "---- stdout of %s %s\n%s---- stderr\n%s----\n", program, kind, out_text,
          err_text);

  int failures = 0;
  if (WIFSIGNALED(status)) {
    if (WTERMSIG(status) != SIGABRT) {
      fprintf(stderr, "FAIL: killed by signal %d (%s), wanted SIGABRT\n", WTERMSIG(status),
              strsignal(WTERMSIG(status)));
      failures++;
    }
  } else {
    fprintf(stderr, "FAIL: exited with status %d, wanted death by SIGABRT\n",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    failures++;
  }

  char prefix[128], address[64] = "";
  snprintf(prefix, sizeof prefix, "misuse: %s ", kind);
  const char *line = strstr(out_text, prefix);
  if (line == NULL || sscanf(line + strlen(prefix), "%63s", address) != 1) {
    fprintf(stderr, "FAIL: the program did not announce the address it misused\n");
    failures++;
  } else if (!mentions_address(err_text, address)) {
    fprintf(stderr, "FAIL: stderr does not mention the address %s\n", address);
    failures++;
  }
  for (int i = 3; i < argc; i++) {
    if (argv[i][0] == '!') {
      if (strcasestr(err_text, argv[i] + 1) != NULL) {
        fprintf(stderr, "FAIL: stderr mentions \"%s\": the report names another kind\n",
                argv[i] + 1);
        failures++;
      }
    } else if (strcasestr(err_text, argv[i]) == NULL) {
      fprintf(stderr, "FAIL: stderr does not mention \"%s\"\n", argv[i]);
      failures++;
    }
  }
  if (failures == 0) fprintf(stderr, "ok: %s reported and aborted\n", kind);
  return failures == 0 ? 0 : 1;
}
