/* The program `mojim bench --lmdb` runs, unmodified, under every target: LMDB transactions
 * of one 4 KiB put each, each commit timed.
 *
 * usage: lmdb_commits DIR WARMUP TXNS MAPSIZE nosync|sync
 *
 * Opens (creating) an LMDB environment in DIR with a map of MAPSIZE bytes, commits WARMUP
 * transactions untimed and then TXNS timed ones, and prints each timed commit's latency in
 * nanoseconds, one per line, at the end. With `nosync` the environment is opened with
 * MDB_NOSYNC (no durability at all); with `sync` LMDB makes every commit durable its own way
 * (pwrite, then fdatasync and an O_DSYNC write of the meta page). */
#include <errno.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(const char *what, int rc) {
    fprintf(stderr, "lmdb_commits: %s: %s\n", what, mdb_strerror(rc));
    return 1;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: lmdb_commits DIR WARMUP TXNS MAPSIZE nosync|sync\n");
        return 2;
    }
    const char *dir = argv[1];
    uint64_t warmup = strtoull(argv[2], NULL, 10);
    uint64_t txns = strtoull(argv[3], NULL, 10);
    size_t mapsize = (size_t)strtoull(argv[4], NULL, 10);
    unsigned flags = strcmp(argv[5], "nosync") == 0 ? MDB_NOSYNC : 0;
    uint64_t *lat = calloc(txns ? txns : 1, sizeof *lat);
    static char value[4096];
    MDB_env *env;
    MDB_dbi dbi;
    MDB_txn *txn;
    int rc;
    if (!lat) return fail("allocate", ENOMEM);
    if ((rc = mdb_env_create(&env))) return fail("mdb_env_create", rc);
    if ((rc = mdb_env_set_mapsize(env, mapsize))) return fail("mdb_env_set_mapsize", rc);
    if ((rc = mdb_env_open(env, dir, flags, 0644))) return fail("mdb_env_open", rc);
    if ((rc = mdb_txn_begin(env, NULL, 0, &txn))) return fail("mdb_txn_begin", rc);
    if ((rc = mdb_dbi_open(txn, NULL, 0, &dbi))) return fail("mdb_dbi_open", rc);
    if ((rc = mdb_txn_commit(txn))) return fail("mdb_txn_commit", rc);
    for (uint64_t i = 0; i < warmup + txns; i++) {
        /* The same 1024 keys over and over: the database stays the same size. */
        uint64_t k = i % 1024;
        MDB_val key = {sizeof k, &k};
        MDB_val val = {sizeof value, value};
        memcpy(value, &i, sizeof i);
        uint64_t t0 = now_ns();
        if ((rc = mdb_txn_begin(env, NULL, 0, &txn))) return fail("mdb_txn_begin", rc);
        if ((rc = mdb_put(txn, dbi, &key, &val, 0))) return fail("mdb_put", rc);
        if ((rc = mdb_txn_commit(txn))) return fail("mdb_txn_commit", rc);
        if (i >= warmup) lat[i - warmup] = now_ns() - t0;
    }
    mdb_env_close(env);
    for (uint64_t i = 0; i < txns; i++) printf("%llu\n", (unsigned long long)lat[i]);
    return 0;
}
