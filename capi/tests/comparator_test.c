/* A custom key order through LevelDB's C API: keys in reverse bytewise order through
   memtables, flushes and compactions; a reopen with another comparator name is refused with
   a clear error and leaves every file as it was; a custom filter policy is asked by lookups
   (the check LevelDB's c_test.c means to make but skips); callback destructors run once,
   when nothing uses the callbacks any more.
   Usage: comparator_test DIR (a directory of its own; the database goes in DIR/db). */

#include "leveldb/c.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

#define CHECK_OK(err)                                                    \
  do {                                                                   \
    if ((err) != NULL) {                                                 \
      fprintf(stderr, "%s:%d: error: %s\n", __FILE__, __LINE__, (err));  \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

enum { N = 20000 };

static int destroyed = 0;
static void Destroy(void* arg) { destroyed++; }

/* Bytewise order, backwards. */
static int ReverseCompare(void* arg, const char* a, size_t alen, const char* b, size_t blen) {
  size_t n = alen < blen ? alen : blen;
  int r = memcmp(b, a, n);
  if (r == 0) r = (alen < blen) ? 1 : (alen > blen) ? -1 : 0;
  return r;
}
static const char* ReverseName(void* arg) { return "test.ReverseBytewise"; }
static const char* OtherName(void* arg) { return "test.Other"; }

static uint8_t filter_answer = 1;
static int filter_created = 0, filter_asked = 0;
static char* FilterCreate(void* arg, const char* const* keys, const size_t* lens, int n, size_t* len) {
  filter_created++;
  *len = 6;
  char* f = malloc(6);
  memcpy(f, "filter", 6);
  return f;
}
static uint8_t FilterMatch(void* arg, const char* key, size_t klen, const char* f, size_t flen) {
  CHECK(flen == 6 && memcmp(f, "filter", 6) == 0);
  filter_asked++;
  return filter_answer;
}
static const char* FilterName(void* arg) { return "test.Filter"; }

static void Key(int i, char* buf) { snprintf(buf, 32, "key%08d", i); }

/* Every key in reverse order from the first, and back again from the last. */
static void CheckOrder(leveldb_t* db, leveldb_readoptions_t* ro) {
  leveldb_iterator_t* it = leveldb_create_iterator(db, ro);
  char want[32];
  size_t len;
  int i = N - 1;
  for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it); leveldb_iter_next(it), i--) {
    Key(i, want);
    const char* k = leveldb_iter_key(it, &len);
    CHECK(i >= 0 && len == strlen(want) && memcmp(k, want, len) == 0);
  }
  CHECK(i == -1);
  i = 0;
  for (leveldb_iter_seek_to_last(it); leveldb_iter_valid(it); leveldb_iter_prev(it), i++) {
    Key(i, want);
    const char* k = leveldb_iter_key(it, &len);
    CHECK(len == strlen(want) && memcmp(k, want, len) == 0);
  }
  CHECK(i == N);
  /* In reverse order the first key at or after "key00000100x" is key00000100. */
  leveldb_iter_seek(it, "key00000100x", 12);
  CHECK(leveldb_iter_valid(it));
  CHECK(memcmp(leveldb_iter_key(it, &len), "key00000100", 11) == 0 && len == 11);
  char* err = NULL;
  leveldb_iter_get_error(it, &err);
  CHECK_OK(err);
  leveldb_iter_destroy(it);
}

/* FNV-1a over the names and bytes of every file in `dir`, in readdir order sorted by name. */
static uint64_t DirDigest(const char* dir) {
  struct dirent** names;
  int n = scandir(dir, &names, NULL, alphasort);
  CHECK(n > 2);
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
    for (const char* c = names[i]->d_name; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      int c;
      while ((c = fgetc(f)) != EOF) h = (h ^ (uint8_t)c) * 1099511628211ULL;
      fclose(f);
    }
    free(names[i]);
  }
  free(names);
  return h;
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  char dbname[4096];
  snprintf(dbname, sizeof(dbname), "%s/db", argv[1]);
  char* err = NULL;

  leveldb_comparator_t* reverse = leveldb_comparator_create(NULL, Destroy, ReverseCompare, ReverseName);
  leveldb_filterpolicy_t* policy = leveldb_filterpolicy_create(NULL, Destroy, FilterCreate, FilterMatch, FilterName);
  leveldb_options_t* opts = leveldb_options_create();
  leveldb_options_set_comparator(opts, reverse);
  leveldb_options_set_filter_policy(opts, policy);
  leveldb_options_set_create_if_missing(opts, 1);
  leveldb_options_set_write_buffer_size(opts, 64 << 10);
  leveldb_readoptions_t* ro = leveldb_readoptions_create();
  leveldb_writeoptions_t* wo = leveldb_writeoptions_create();

  leveldb_destroy_db(opts, dbname, &err);
  CHECK_OK(err);
  leveldb_t* db = leveldb_open(opts, dbname, &err);
  CHECK_OK(err);
  char key[32], val[128];
  for (int i = 0; i < N; i++) {
    int k = (int)(((long long)i * 7919) % N);
    Key(k, key);
    snprintf(val, sizeof(val), "value of %s, padded to a hundred bytes.......................................", key);
    leveldb_put(db, wo, key, strlen(key), val, strlen(val), &err);
    CHECK_OK(err);
  }
  CheckOrder(db, ro);
  leveldb_compact_range(db, NULL, 0, NULL, 0);
  CheckOrder(db, ro);
  char* files = leveldb_property_value(db, "leveldb.num-files-at-level0");
  CHECK(files != NULL && strcmp(files, "0") == 0);
  leveldb_free(files);
  uint64_t sizes[1];
  const char* start = "key99999999";
  const char* limit = "key";
  size_t start_len = 11, limit_len = 3;
  leveldb_approximate_sizes(db, 1, &start, &start_len, &limit, &limit_len, sizes);
  CHECK(sizes[0] > N * 100 / 2); /* In reverse order key99999999..key holds every key. */

  /* The filter policy built the tables' filters and is asked by lookups. */
  size_t vlen;
  Key(123, key);
  char* v = leveldb_get(db, ro, key, strlen(key), &vlen, &err);
  CHECK_OK(err);
  CHECK(v != NULL && vlen > 20 && memcmp(v, "value of key00000123", 20) == 0);
  leveldb_free(v);
  CHECK(filter_created > 0 && filter_asked > 0);
  filter_answer = 0;
  v = leveldb_get(db, ro, key, strlen(key), &vlen, &err);
  CHECK_OK(err);
  CHECK(v == NULL && vlen == 0);
  filter_answer = 1;
  leveldb_close(db);

  /* Another comparator name: refused, nothing changed. */
  uint64_t before = DirDigest(dbname);
  leveldb_comparator_t* other = leveldb_comparator_create(NULL, Destroy, ReverseCompare, OtherName);
  leveldb_options_t* wrong = leveldb_options_create();
  for (int attempt = 0; attempt < 2; attempt++) {
    leveldb_options_set_comparator(wrong, attempt == 0 ? NULL : other);
    db = leveldb_open(wrong, dbname, &err);
    CHECK(db == NULL && err != NULL);
    CHECK(strstr(err, "Invalid argument") != NULL && strstr(err, "comparator") != NULL);
    CHECK(strstr(err, "test.ReverseBytewise") != NULL);
    fprintf(stderr, "refused as expected: %s\n", err);
    leveldb_free(err);
    err = NULL;
    CHECK(DirDigest(dbname) == before);
  }
  leveldb_options_destroy(wrong);
  leveldb_comparator_destroy(other);
  CHECK(destroyed == 1); /* `other`: nothing uses it any more. */

  /* The right comparator: everything is there. */
  db = leveldb_open(opts, dbname, &err);
  CHECK_OK(err);
  CheckOrder(db, ro);
  leveldb_comparator_destroy(reverse);
  leveldb_filterpolicy_destroy(policy);
  CHECK(destroyed == 1); /* The options and the open database still use them. */
  leveldb_close(db);
  leveldb_options_destroy(opts);
  CHECK(destroyed == 3);

  leveldb_readoptions_destroy(ro);
  leveldb_writeoptions_destroy(wo);
  fprintf(stderr, "PASS\n");
  return 0;
}
