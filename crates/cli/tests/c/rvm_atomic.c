/*
 * Commit atomicity in recoverable memory, for tests/rvm_c.rs: an array of WORDS words (several
 * pages) in recoverable memory, changed at random places before each commit, with the commit
 * counter and a checksum of the whole array stored beside it in the same transaction. The test
 * kills this program with SIGKILL at random moments and starts it again.
 *
 * The state after commit k is a function of k alone (commit k writes STEP words, at places and
 * with values drawn from k), so on start the program checks what it recovered twice: the
 * checksum stored with the counter is the array's, and the array is exactly the one k commits
 * make (replayed in ordinary memory). A commit torn in two, or one lost half-way, fails both.
 *
 * Output, one line each, flushed:
 *   fresh STATUS                       no committed state: created empty
 *   recovered commits=K sum=ok replay=ok STATUS
 *   recovered commits=K sum=BAD|ok replay=BAD|ok ...   then exit 3
 *   commit K                           commit K returned (it is durable)
 *   done commits=K                     ITERATIONS commits made, destroyed, exit 0
 * STATUS: tracking=T fell_back=0|1 backend=B capacity=C used=U blocks=N seq=S
 *
 * Usage: rvm_atomic CONFIG [ITERATIONS]   (without ITERATIONS: commit until killed)
 */
#define _GNU_SOURCE
#include <mojim.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORDS 32768 /* 256 KiB: 64 pages */
#define STEP 24     /* words written per commit */

struct state {
    uint64_t commits; /* commits made; commit k stores k */
    uint64_t sum;     /* checksum(array) as of that commit */
    uint64_t *array;  /* WORDS words, a block of recoverable memory */
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Commit k's changes, into `a`. */
static void step(uint64_t *a, uint64_t k)
{
    for (uint64_t j = 0; j < STEP; j++) {
        uint64_t r = mix(k * STEP + j);
        a[r % WORDS] = mix(r) | 1; /* never 0: a lost write shows */
    }
}

static uint64_t checksum(const uint64_t *a)
{
    uint64_t s = 0;
    for (uint64_t i = 0; i < WORDS; i++)
        s = s * 31 + mix(a[i] ^ i);
    return s;
}

static void fail(const char *what)
{
    fprintf(stderr, "rvm_atomic: %s failed: %s (%s)\n", what, mojim_last_error(),
            mojim_strerror(mojim_last_error_code()));
    exit(1);
}

static void print_status(rvm_cfg_t *cfg)
{
    rvm_status_t st = {.size = sizeof st};
    if (rvm_status(cfg, &st) != MOJIM_OK)
        fail("rvm_status");
    printf("tracking=%s fell_back=%u backend=%s capacity=%" PRIu64 " used=%" PRIu64 " blocks=%" PRIu64
           " seq=%" PRIu64 "\n",
           st.tracking, st.fell_back, st.backend, st.capacity, st.used, st.blocks, st.seq);
    if (st.fell_back)
        fprintf(stderr, "rvm_atomic: userfaultfd is not in use: %s\n", st.fallback);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: rvm_atomic CONFIG [ITERATIONS]\n");
        return 2;
    }
    long iterations = argc > 2 ? atol(argv[2]) : -1;
    rvm_cfg_t *cfg = rvm_cfg_create(argv[1], NULL);
    if (cfg == NULL)
        fail("rvm_cfg_create");
    struct state *s = rvm_get_usr_data(cfg);
    if (s == NULL) {
        /* Nothing committed yet (or a run was killed before its first commit). */
        if ((s = rvm_alloc(cfg, sizeof *s)) == NULL || (s->array = rvm_alloc(cfg, WORDS * 8)) == NULL)
            fail("rvm_alloc");
        s->commits = 0;
        s->sum = checksum(s->array); /* rvm_alloc zeroes */
        if (rvm_set_usr_data(cfg, s) != MOJIM_OK)
            fail("rvm_set_usr_data");
        if (rvm_txn_commit(cfg) != MOJIM_OK)
            fail("rvm_txn_commit");
        printf("fresh ");
        print_status(cfg);
    } else {
        uint64_t *expect = calloc(WORDS, 8);
        if (expect == NULL)
            return 1;
        for (uint64_t k = 1; k <= s->commits; k++)
            step(expect, k);
        int sum_ok = checksum(s->array) == s->sum;
        int replay_ok = memcmp(expect, s->array, WORDS * 8) == 0;
        free(expect);
        printf("recovered commits=%" PRIu64 " sum=%s replay=%s ", s->commits, sum_ok ? "ok" : "BAD",
               replay_ok ? "ok" : "BAD");
        print_status(cfg);
        if (!sum_ok || !replay_ok) {
            fflush(stdout);
            return 3;
        }
    }
    fflush(stdout);
    for (long i = 0; iterations < 0 || i < iterations; i++) {
        rvm_txn_start(cfg);
        uint64_t k = s->commits + 1;
        step(s->array, k);
        s->sum = checksum(s->array);
        s->commits = k;
        if (rvm_txn_commit(cfg) != MOJIM_OK)
            fail("rvm_txn_commit");
        printf("commit %" PRIu64 "\n", k);
        fflush(stdout);
    }
    printf("done commits=%" PRIu64 "\n", s->commits);
    if (rvm_cfg_destroy(cfg) != MOJIM_OK)
        fail("rvm_cfg_destroy");
    return 0;
}
