/*
 * The program that the gcc case of tests/preload/preload.sh compiles and runs (under glibc and
 * under magpie): a word-frequency count over generated text in a chained hash table that grows
 * by rehashing, words kept in strings that grow with realloc, and a qsort of the results. Its
 * output is a few deterministic lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORDS 400000
#define INITIAL_BUCKETS 16

typedef struct entry {
  struct entry *next;
  char *word;
  unsigned long count;
} entry_t;

typedef struct {
  entry_t **buckets;
  size_t nbuckets, nentries;
} table_t;

static uint64_t rng_state = 88172645463325252ULL;

static uint64_t next_random(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static uint64_t hash_word(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static void *must(void *p) {
  if (p == NULL) {
    fputs("out of memory\n", stderr);
    exit(1);
  }
  return p;
}

static void grow(table_t *t) {
  size_t n = t->nbuckets * 2;
  entry_t **fresh = must(calloc(n, sizeof *fresh));
  for (size_t i = 0; i < t->nbuckets; i++) {
    entry_t *e = t->buckets[i];
    while (e != NULL) {
      entry_t *next = e->next;
      size_t slot = hash_word(e->word) & (n - 1);
      e->next = fresh[slot];
      fresh[slot] = e;
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = fresh;
  t->nbuckets = n;
}

static void add_word(table_t *t, const char *word) {
  size_t slot = hash_word(word) & (t->nbuckets - 1);
  for (entry_t *e = t->buckets[slot]; e != NULL; e = e->next) {
    if (strcmp(e->word, word) == 0) {
      e->count++;
      return;
    }
  }
  entry_t *e = must(malloc(sizeof *e));
  e->word = must(strdup(word));
  e->count = 1;
  e->next = t->buckets[slot];
  t->buckets[slot] = e;
  if (++t->nentries > t->nbuckets) grow(t);
}

static int by_count_then_word(const void *a, const void *b) {
  const entry_t *x = *(entry_t *const *)a, *y = *(entry_t *const *)b;
  if (x->count != y->count) return x->count > y->count ? -1 : 1;
  return strcmp(x->word, y->word);
}

int main(void) {
  table_t t = {must(calloc(INITIAL_BUCKETS, sizeof(entry_t *))), INITIAL_BUCKETS, 0};
  char *text = NULL;
  size_t text_len = 0;
  for (int i = 0; i < WORDS; i++) {
    char word[16];
    int len = 1 + (int)(next_random() % 6);
    for (int k = 0; k < len; k++)
      word[k] = (char)('a' + next_random() % (k == 0 ? 26 : 5));
    word[len] = '\0';
    add_word(&t, word);
    if (i % 50 == 0) { /* a growing transcript */
      text = must(realloc(text, text_len + (size_t)len + 2));
      memcpy(text + text_len, word, (size_t)len);
      text_len += (size_t)len;
      text[text_len++] = ' ';
      text[text_len] = '\0';
    }
  }
  entry_t **all = must(malloc(t.nentries * sizeof *all));
  size_t n = 0;
  for (size_t i = 0; i < t.nbuckets; i++)
    for (entry_t *e = t.buckets[i]; e != NULL; e = e->next)
      all[n++] = e;
  qsort(all, n, sizeof *all, by_count_then_word);
  printf("distinct %zu buckets %zu transcript %zu hash %016llx\n", n, t.nbuckets, text_len,
         (unsigned long long)hash_word(text));
  for (size_t i = 0; i < 8 && i < n; i++)
    printf("%s %lu\n", all[i]->word, all[i]->count);
  for (size_t i = 0; i < n; i++) {
    free(all[i]->word);
    free(all[i]);
  }
  free(all);
  free(t.buckets);
  free(text);
  return 0;
}
