/*
 * fig1.c: Fig. 1 of the Mojim paper (ASPLOS '15), in C over libmojim.
 *
 * The region holds an access count, a log's size and the log. Each iteration
 *   1. counts an access and makes the count persistent with mojim_msync, then
 *   2. appends an entry to the log and makes the entry and the log's size persistent together,
 *      atomically, with mojim_gmsync: on the mirror the size never covers a missing entry.
 * After each sync point returns it prints the acknowledged state, "count=C log=S", and
 * flushes. Entry i of the log holds i + 1 (the count when it was appended), so on the mirror
 * (and after any crash) count == size or count == size + 1.
 *
 * Run it again on the same region and it continues the count: a run killed between the two
 * sync points of an iteration left the count one ahead of the log, and the next run finishes
 * that iteration first.
 *
 * Build (see docs/C.md):
 *   cargo build -p mojim-capi --release
 *   cc -Iinclude examples/c/fig1.c -Ltarget/release -Wl,-rpath,$PWD/target/release -lmojim -o fig1
 *   ./fig1 mojim.toml 1000        # or without a count: run until killed
 */
#include <errno.h>
#include <inttypes.h>
#include <mojim.h>
#include <stdio.h>
#include <stdlib.h>

/* The region's layout, as in Fig. 1. */
struct fig1 {
    uint64_t access_count; /* accesses so far */
    uint64_t log_size;     /* entries in the log */
    uint64_t log[];        /* entry i holds i + 1 */
};

static void fail(const char *what, int rc)
{
    fprintf(stderr, "fig1: %s failed: %s (%s)\n", what, mojim_last_error(), mojim_strerror(rc));
    exit(1);
}

static void acknowledged(const struct fig1 *r)
{
    printf("count=%" PRIu64 " log=%" PRIu64 "\n", r->access_count, r->log_size);
    fflush(stdout);
}

/* Fig. 1, top: a memory load and store, made persistent with the conventional msync. */
static void count_access(struct mojim *h, struct fig1 *r)
{
    r->access_count = r->access_count + 1;
    int rc = mojim_msync(h, &r->access_count, sizeof r->access_count);
    if (rc != MOJIM_OK)
        fail("mojim_msync of the access count", rc);
    acknowledged(r);
}

/* Fig. 1, bottom: append an entry and grow the log; one gmsync commits both. */
static void append(struct mojim *h, struct fig1 *r, uint64_t capacity)
{
    uint64_t pos = r->log_size;
    if (pos >= capacity) {
        fprintf(stderr, "fig1: the log is full (%" PRIu64 " entries): use a larger region\n", pos);
        exit(3);
    }
    r->log[pos] = r->access_count;
    r->log_size = pos + 1;
    struct mojim_range input[2] = {
        {.ptr = &r->log[pos], .len = sizeof r->log[pos]},
        {.ptr = &r->log_size, .len = sizeof r->log_size},
    };
    int rc = mojim_gmsync(h, input, 2);
    if (rc != MOJIM_OK)
        fail("mojim_gmsync of the log append", rc);
    acknowledged(r);
}

/* A run killed anywhere leaves count == size or count == size + 1 in the region, possibly not
 * yet synced: sync what the region holds, and finish an iteration cut short. */
static void recover(struct mojim *h, struct fig1 *r, uint64_t capacity)
{
    uint64_t count = r->access_count, size = r->log_size;
    if (size > capacity || (count != size && count != size + 1)) {
        fprintf(stderr,
                "fig1: the region holds count=%" PRIu64 " log=%" PRIu64
                ", which no run of fig1 leaves: give it a fresh region\n",
                count, size);
        exit(4);
    }
    int rc = mojim_msync(h, &r->access_count, sizeof r->access_count);
    if (rc != MOJIM_OK)
        fail("mojim_msync of the access count", rc);
    if (size > 0) {
        struct mojim_extent last[2] = {
            {.offset = sizeof *r + (size - 1) * sizeof r->log[0], .len = sizeof r->log[0]},
            {.offset = sizeof r->access_count, .len = sizeof r->log_size},
        };
        rc = mojim_gmsync_at(h, last, 2);
        if (rc != MOJIM_OK)
            fail("mojim_gmsync_at of the log's end", rc);
    }
    acknowledged(r);
    if (count == size + 1)
        append(h, r, capacity);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: fig1 CONFIG [ITERATIONS]   (without ITERATIONS: until killed)\n");
        return 2;
    }
    long long iterations = -1;
    if (argc == 3) {
        char *end;
        errno = 0;
        iterations = strtoll(argv[2], &end, 10);
        if (errno != 0 || *end != '\0' || iterations < 0) {
            fprintf(stderr, "fig1: ITERATIONS %s is not a number of iterations (0 or more)\n", argv[2]);
            return 2;
        }
    }

    struct mojim *h;
    int rc = mojim_open(argv[1], 0, &h);
    if (rc != MOJIM_OK)
        fail("mojim_open", rc);
    struct fig1 *r = mojim_base(h);
    uint64_t size = mojim_size(h);
    if (size < sizeof *r + sizeof r->log[0]) {
        fprintf(stderr, "fig1: the region (%" PRIu64 " bytes) is too small for a log\n", size);
        return 3;
    }
    uint64_t capacity = (size - sizeof *r) / sizeof r->log[0];

    recover(h, r, capacity);
    for (long long i = 0; iterations < 0 || i < iterations; i++) {
        count_access(h, r);
        append(h, r, capacity);
    }

    rc = mojim_close(h);
    if (rc != MOJIM_OK)
        fail("mojim_close", rc);
    return 0;
}
