/*
 * Leak programs for the LeakSanitizer oracle (leak_oracle.py): each case is built twice, once
 * with -fsanitize=leak and once plain to run on magpie's debug mode, and the two leak reports
 * must name the same blocks. The functions whose names start with site_ allocate; the reports
 * are compared by the site_ function in each allocation stack. Every case also drops one
 * 77-byte block (site_control), so that a run without magpie's report fails.
 *
 *   dropped        10 blocks of 1000..1009 bytes whose pointers die with their frame: direct
 *   list           a list of 5 nodes behind a head whose pointer is dropped: the head direct,
 *                  the nodes indirect
 *   global         a block a global points to: reachable
 *   heap           a block only another block points to, that one a global's: both reachable
 *   thread_stack   a block only a live (blocked) thread's frame points to: reachable; 3 blocks
 *                  that thread dropped before it blocked (their pointers left in dead frames
 *                  below its stack pointer): direct
 *   thread_exited  3 blocks a thread dropped before it exited (its stack may stay mapped, in
 *                  glibc's cache of stacks): direct
 *   thread_churn   8 rounds of 16 threads at once, each dropping 3 blocks and exiting (their
 *                  exits recorded concurrently, their stacks reused from glibc's cache): direct
 *   cycle          two blocks pointing to each other, nothing else to them: both indirect (no
 *                  block of the cycle is more direct than the other)
 *   fork           a child leaks 4242 bytes and exits: the child's report lists them
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile char sink;
void *root_global;

struct node {
  struct node *next;
  char payload[40];
};

NOINLINE void site_control(void) {
  char *volatile p = malloc(77);
  p[0] = 1;
}

/* The program: the pointers live only in this frame, which exit() leaves below. */
NOINLINE void site_dropped(void) {
  for (int i = 0; i < 10; i++) {
    char *p = malloc(1000 + i);
    sink = p[0];
  }
}

NOINLINE struct node *site_list_node(struct node *next) {
  struct node *n = malloc(sizeof *n);
  n->next = next;
  return n;
}

NOINLINE void *site_list_head(struct node *first) {
  void **head = malloc(3 * sizeof(void *));
  head[0] = first;
  return head;
}

NOINLINE void make_list(void) {
  struct node *first = NULL;
  for (int i = 0; i < 5; i++)
    first = site_list_node(first);
  void *volatile head = site_list_head(first);
  (void)head;
}

NOINLINE void *site_global(void) {
  return malloc(555);
}

NOINLINE void *site_held(void) {
  return malloc(444);
}

NOINLINE void *site_holder(void) {
  void **holder = malloc(2 * sizeof(void *));
  holder[1] = site_held();
  return holder;
}

/* The pointers are kept at the deep end of a 4 KiB frame: after the function returns they lie
   below the stack pointer, deeper than the calls that follow reach. */
NOINLINE void site_thread_dropped(void) {
  char *volatile slots[512];
  for (int i = 0; i < 3; i++) {
    slots[i] = malloc(2000 + i);
    sink = slots[i][0];
  }
  slots[511] = NULL;
}

NOINLINE void *site_thread_held(void) {
  return malloc(333);
}

NOINLINE void wait_forever(void) {
  for (;;)
    pause();
}

static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
static int ready;

static void announce_ready(void) {
  pthread_mutex_lock(&ready_lock);
  ready = 1;
  pthread_cond_signal(&ready_cond);
  pthread_mutex_unlock(&ready_lock);
}

static void await_ready(void) {
  pthread_mutex_lock(&ready_lock);
  while (!ready)
    pthread_cond_wait(&ready_cond, &ready_lock);
  pthread_mutex_unlock(&ready_lock);
}

static void *holding_thread(void *arg) {
  (void)arg;
  void *volatile mine = site_thread_held();
  site_thread_dropped();
  announce_ready();
  wait_forever();
  return mine;
}

static void *exiting_thread(void *arg) {
  (void)arg;
  site_thread_dropped();
  return NULL;
}

struct cycle {
  struct cycle *other;
  char payload[24];
};

NOINLINE struct cycle *site_cycle_a(void) {
  return calloc(1, sizeof(struct cycle));
}

NOINLINE struct cycle *site_cycle_b(struct cycle *a) {
  struct cycle *b = calloc(1, sizeof(struct cycle));
  b->other = a;
  a->other = b;
  return b;
}

NOINLINE void make_cycle(void) {
  struct cycle *volatile b = site_cycle_b(site_cycle_a());
  (void)b;
}

NOINLINE void site_child(void) {
  char *volatile p = malloc(4242);
  p[0] = 1;
}

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "";
  pthread_t t;
  if (strcmp(name, "dropped") == 0) {
    site_dropped();
  } else if (strcmp(name, "list") == 0) {
    make_list();
  } else if (strcmp(name, "global") == 0) {
    root_global = site_global();
  } else if (strcmp(name, "heap") == 0) {
    root_global = site_holder();
  } else if (strcmp(name, "thread_stack") == 0) {
    if (pthread_create(&t, NULL, holding_thread, NULL) != 0) return 2;
    await_ready();
  } else if (strcmp(name, "thread_exited") == 0) {
    if (pthread_create(&t, NULL, exiting_thread, NULL) != 0 || pthread_join(t, NULL) != 0)
      return 2;
  } else if (strcmp(name, "thread_churn") == 0) {
    for (int round = 0; round < 8; round++) {
      pthread_t many[16];
      for (int i = 0; i < 16; i++)
        if (pthread_create(&many[i], NULL, exiting_thread, NULL) != 0) return 2;
      for (int i = 0; i < 16; i++)
        if (pthread_join(many[i], NULL) != 0) return 2;
    }
  } else if (strcmp(name, "cycle") == 0) {
    make_cycle();
  } else if (strcmp(name, "fork") == 0) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      site_child();
      exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 2;
  } else {
    fprintf(stderr, "usage: leak_oracle CASE\n");
    return 2;
  }
  site_control();
  exit(0);
}
