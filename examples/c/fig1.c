/* The Mojim paper's Fig. 1, in C: an access count made persistent with msync, and a log
 * append made atomic with gmsync.
 *
 * usage: fig1 CONFIG [ITERATIONS]
 *
 * The region holds, at offset 0, the count; at 2048, the log's length; from 4096, the log's
 * entries of 64 bytes (the count when the entry was appended, then a text). Each iteration
 * counts one access (msync of the count alone), then appends an entry and makes the entry and
 * the new length durable together (gmsync: never one without the other). After each sync
 * point returns it prints "count=C log=L": what the mirror has for certain. Run again, it
 * carries on from what its region holds.
 *
 * Build: cc -Iinclude examples/c/fig1.c -Ltarget/release -lmojim -Wl,-rpath,$PWD/target/release */
#include <mojim.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    uint64_t count;
    char text[56];
};

static int die(const char *what, int rc) {
    fprintf(stderr, "fig1: %s: %s (%d)\n", what, mojim_last_error(), rc);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fig1 CONFIG [ITERATIONS]\n");
        return 2;
    }
    uint64_t iterations = argc > 2 ? strtoull(argv[2], NULL, 10) : UINT64_MAX;
    struct mojim *m;
    int rc = mojim_open(argv[1], 0, &m);
    if (rc != MOJIM_OK) return die("open", rc);
    char *base = mojim_base(m);
    uint64_t *count = (uint64_t *)base;
    uint64_t *log_len = (uint64_t *)(base + 2048);
    struct entry *log = (struct entry *)(base + 4096);
    uint64_t capacity = (mojim_size(m) - 4096) / sizeof(struct entry);

    for (uint64_t i = 0; i < iterations && *log_len < capacity; i++) {
        /* An access: the count alone, persistent before the access is acted on. */
        *count += 1;
        if ((rc = mojim_msync(m, count, sizeof *count)) != MOJIM_OK) return die("msync", rc);
        /* A log append: the entry and the length that covers it, atomically. */
        struct entry *e = &log[*log_len];
        e->count = *count;
        snprintf(e->text, sizeof e->text, "access %llu", (unsigned long long)*count);
        *log_len += 1;
        struct mojim_range group[2] = {{e, sizeof *e}, {log_len, sizeof *log_len}};
        if ((rc = mojim_gmsync(m, group, 2)) != MOJIM_OK) return die("gmsync", rc);
        printf("count=%llu log=%llu\n", (unsigned long long)*count, (unsigned long long)*log_len);
        fflush(stdout);
    }
    if ((rc = mojim_close(m)) != MOJIM_OK) return die("close", rc);
    return 0;
}
