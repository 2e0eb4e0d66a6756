/* fillrandom and readrandom through LevelDB's C API, as LevelDB's db_bench runs them (the
   same key sequence, 16-byte keys, values of db_bench's generator at compression ratio 0.5),
   printing db_bench's lines. Built against leveldb/c.h it runs on wisckey (-lwisckey_c) or on
   LevelDB itself (-lleveldb): the cost of the C boundary is what separates it from
   `wisckey bench` on the same workload.
   usage: c_bench [--num=N] [--value_size=S] [--db=DIR]   (DIR: default a fresh temporary one,
   removed at the end) */

#include "leveldb/c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* LevelDB's util/random.h: seed = seed * 16807 % (2^31 - 1). */
typedef struct {
  uint32_t seed;
} Random;

static Random NewRandom(uint32_t s) {
  Random r;
  r.seed = s & 0x7fffffffu;
  if (r.seed == 0 || r.seed == 2147483647u) r.seed = 1;
  return r;
}

static uint32_t Next(Random* r) {
  const uint32_t M = 2147483647u;
  uint64_t product = (uint64_t)r->seed * 16807;
  uint32_t seed = (uint32_t)((product >> 31) + (product & M));
  if (seed > M) seed -= M;
  r->seed = seed;
  return seed;
}

static uint32_t Uniform(Random* r, uint32_t n) { return Next(r) % n; }

/* db_bench's RandomGenerator: 1 MiB of 100-byte compressible pieces, handed out in slices. */
typedef struct {
  char* data;
  size_t len, pos;
} Generator;

static Generator NewGenerator(double ratio) {
  Generator g;
  size_t cap = (1 << 20) + 100;
  g.data = malloc(cap);
  g.len = 0;
  g.pos = 0;
  Random rnd = NewRandom(301);
  while (g.len < (1 << 20)) {
    int raw = (int)(100 * ratio);
    if (raw < 1) raw = 1;
    char piece[100];
    for (int i = 0; i < raw; i++) piece[i] = (char)(' ' + Uniform(&rnd, 95));
    for (int i = 0; i < 100; i++) g.data[g.len + i] = piece[i % raw];
    g.len += 100;
  }
  return g;
}

static const char* Generate(Generator* g, size_t len) {
  if (g->pos + len > g->len) g->pos = 0;
  g->pos += len;
  return g->data + g->pos - len;
}

/* db_bench's key "%016d" of `k`, written digit by digit (snprintf would cost more than the
   boundary this program measures; `wisckey bench` formats its keys the same way). */
static void Key(uint32_t k, char* key) {
  for (int i = 15; i >= 0; i--) {
    key[i] = (char)('0' + k % 10);
    k /= 10;
  }
}

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void Check(char* err, const char* what) {
  if (err != NULL) {
    fprintf(stderr, "%s: %s\n", what, err);
    exit(1);
  }
}

int main(int argc, char** argv) {
  long num = 1000000, value_size = 100;
  char dir[4096] = "";
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--num=%ld", &num) == 1 || sscanf(argv[i], "--value_size=%ld", &value_size) == 1) continue;
    if (strncmp(argv[i], "--db=", 5) == 0) {
      snprintf(dir, sizeof(dir), "%s", argv[i] + 5);
      continue;
    }
    fprintf(stderr, "unknown flag %s\nusage: c_bench [--num=N] [--value_size=S] [--db=DIR]\n", argv[i]);
    return 2;
  }
  char tmp[] = "/tmp/c_bench-XXXXXX";
  int temporary = dir[0] == '\0';
  if (temporary) {
    if (mkdtemp(tmp) == NULL) return 1;
    snprintf(dir, sizeof(dir), "%s/db", tmp);
  }
  char* err = NULL;
  leveldb_options_t* options = leveldb_options_create();
  leveldb_options_set_create_if_missing(options, 1);
  leveldb_destroy_db(options, dir, &err);
  Check(err, "destroy");
  leveldb_t* db = leveldb_open(options, dir, &err);
  Check(err, "open");
  leveldb_writeoptions_t* wo = leveldb_writeoptions_create();
  leveldb_readoptions_t* ro = leveldb_readoptions_create();
  Generator gen = NewGenerator(0.5);
  char key[16];

  /* fillrandom: thread 0's generator of the first benchmark (db_bench's seed 1000 + 1). */
  Random rnd = NewRandom(1001);
  double start = Now();
  for (long i = 0; i < num; i++) {
    Key(Uniform(&rnd, (uint32_t)num), key);
    leveldb_put(db, wo, key, 16, Generate(&gen, value_size), value_size, &err);
    Check(err, "put");
  }
  double secs = Now() - start;
  printf("fillrandom   : %11.3f micros/op; %6.1f MB/s\n", secs * 1e6 / num,
         (16.0 + value_size) * num / 1048576.0 / secs);

  /* readrandom: the second benchmark's generator (seed 1000 + 2). */
  rnd = NewRandom(1002);
  long found = 0;
  start = Now();
  for (long i = 0; i < num; i++) {
    Key(Uniform(&rnd, (uint32_t)num), key);
    size_t len;
    char* v = leveldb_get(db, ro, key, 16, &len, &err);
    Check(err, "get");
    if (v != NULL) {
      found++;
      leveldb_free(v);
    }
  }
  secs = Now() - start;
  printf("readrandom   : %11.3f micros/op; (%ld of %ld found)\n", secs * 1e6 / num, found, num);

  leveldb_close(db);
  if (temporary) {
    leveldb_destroy_db(options, dir, &err);
    Check(err, "destroy");
    rmdir(tmp);
  }
  leveldb_options_destroy(options);
  leveldb_writeoptions_destroy(wo);
  leveldb_readoptions_destroy(ro);
  free(gen.data);
  return 0;
}
