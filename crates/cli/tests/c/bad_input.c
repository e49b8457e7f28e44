/*
 * Bad input through the C API, for tests/c_api.rs: each case prints one line,
 *   CASE CODE_NAME MESSAGE
 * (MESSAGE: mojim_last_error() after a failure, "-" after a success), and the test checks the
 * codes and messages. Then THREADS threads share the handle (as the header allows), each
 * syncing its own 8-byte counter ROUNDS times, by pointer and with persist/wait in turn, and
 * the line "threads OK" says each counter reached ROUNDS; the test reads them on the mirror.
 * Usage: bad_input CONFIG (a region whose mirror runs, mode sync).
 */
#include <mojim.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 200
#define COUNTERS_AT 8192

struct worker {
    struct mojim *h;
    uint64_t *counter;
    int failed; /* the first failing code, 0 if none */
};

static void *work(void *arg)
{
    struct worker *w = arg;
    for (uint64_t i = 1; i <= ROUNDS && w->failed == 0; i++) {
        *w->counter = i;
        if (i % 2 == 0) {
            w->failed = mojim_msync(w->h, w->counter, sizeof *w->counter);
        } else {
            struct mojim_range r = {.ptr = w->counter, .len = sizeof *w->counter};
            struct mojim_ticket t;
            w->failed = mojim_persist(w->h, &r, 1, &t);
            if (w->failed == 0)
                w->failed = mojim_wait(w->h, t);
        }
        if (w->failed != 0)
            fprintf(stderr, "thread: %s\n", mojim_last_error());
    }
    return NULL;
}

static void threads(struct mojim *h, char *base)
{
    pthread_t tid[THREADS];
    struct worker w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (struct worker){.h = h, .counter = (uint64_t *)(base + COUNTERS_AT + t * 4096), .failed = 0};
        if (pthread_create(&tid[t], NULL, work, &w[t]) != 0) {
            printf("threads pthread_create-failed\n");
            return;
        }
    }
    int rc = MOJIM_OK;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        if (w[t].failed != 0 || *w[t].counter != ROUNDS)
            rc = w[t].failed != 0 ? w[t].failed : MOJIM_EBUG;
    }
    printf("threads %s\n", rc == MOJIM_OK ? "OK" : mojim_strerror(rc));
    fflush(stdout);
}

static void report(const char *name, int rc)
{
    printf("%s %s %s\n", name, mojim_strerror(rc), rc == MOJIM_OK ? "-" : mojim_last_error());
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bad_input CONFIG\n");
        return 2;
    }
    struct mojim *h = (struct mojim *)1;

    /* Opening. */
    report("open-missing-config", mojim_open("/nonexistent/mojim-c-test.toml", 0, &h));
    if (h != NULL) {
        printf("open-missing-config-handle not-null\n");
        return 1;
    }
    report("open-null-path", mojim_open(NULL, 0, &h));
    report("open-null-out", mojim_open(argv[1], 0, NULL));
    report("open-unknown-flags", mojim_open(argv[1], 0x6, &h));

    int rc = mojim_open(argv[1], 0, &h);
    report("open", rc);
    if (rc != MOJIM_OK)
        return 1;
    struct mojim *second = (struct mojim *)1;
    report("open-twice", mojim_open(argv[1], 0, &second));
    if (second != NULL) {
        printf("open-twice-handle not-null\n");
        return 1;
    }
    char *base = mojim_base(h);
    uint64_t size = mojim_size(h);

    /* Pointers and ranges outside the mapping, NULLs. */
    report("msync-before-base", mojim_msync(h, base - 1, 8));
    report("msync-past-end", mojim_msync(h, base + size - 4, 8));
    report("msync-far-away", mojim_msync(h, (void *)&argc, sizeof argc));
    report("msync-null-ptr", mojim_msync(h, NULL, 8));
    report("msync-null-handle", mojim_msync(NULL, base, 8));
    report("msync-at-past-end", mojim_msync_at(h, size, 1));
    report("msync-at-overflow", mojim_msync_at(h, UINT64_MAX, 2));
    struct mojim_range mixed[2] = {{.ptr = base, .len = 8}, {.ptr = base + size, .len = 1}};
    report("gmsync-one-outside", mojim_gmsync(h, mixed, 2));
    struct mojim_range with_null[2] = {{.ptr = base, .len = 8}, {.ptr = NULL, .len = 1}};
    report("gmsync-null-range-ptr", mojim_gmsync(h, with_null, 2));
    report("gmsync-null-ranges", mojim_gmsync(h, NULL, 1));
    struct mojim_range *many = calloc(1025, sizeof *many);
    for (int i = 0; i < 1025; i++) {
        many[i].ptr = base + i;
        many[i].len = 1;
    }
    report("gmsync-too-many", mojim_gmsync(h, many, 1025));
    free(many);
    struct mojim_extent outside = {.offset = size - 1, .len = 2};
    report("gmsync-at-outside", mojim_gmsync_at(h, &outside, 1));
    report("base-null-handle", mojim_base(NULL) == NULL ? MOJIM_EINVAL : MOJIM_OK);
    report("size-null-handle", mojim_size(NULL) == 0 ? MOJIM_EINVAL : MOJIM_OK);

    /* Good calls still work after the bad ones. */
    memcpy(base, "hello from C", 12);
    report("msync", mojim_msync(h, base, 12));
    struct mojim_range both[2] = {{.ptr = base + 4096, .len = 3}, {.ptr = base, .len = 12}};
    memcpy(base + 4096, "abc", 3);
    report("gmsync", mojim_gmsync(h, both, 2));
    struct mojim_extent ext = {.offset = 4096, .len = 3};
    report("gmsync-at", mojim_gmsync_at(h, &ext, 1));

    /* Fences: a ticket is only good unchanged, on the handle that issued it. */
    struct mojim_ticket t;
    report("persist", mojim_persist(h, both, 2, &t));
    report("persist-null-ticket", mojim_persist(h, both, 2, NULL));
    struct mojim_ticket forged = t;
    forged.seq += 1;
    report("wait-forged", mojim_wait(h, forged));
    report("wait", mojim_wait(h, t));
    struct mojim_ticket t2;
    report("persist-at", mojim_persist_at(h, &ext, 1, &t2));
    report("wait-at", mojim_wait(h, t2));

    /* Status: the caller says how large its struct is. */
    struct mojim_status st;
    memset(&st, 0, sizeof st);
    report("status-size-unset", mojim_status(h, &st));
    report("status-null", mojim_status(h, NULL));
    st.size = sizeof st;
    rc = mojim_status(h, &st);
    report("status", rc);
    printf("status-fields size=%u role=%u mode=%u mirror_state=%u lanes=%u acked_ok=%d vulnerable=%s mirror=%s\n",
           st.size, st.role, st.mode, st.mirror_state, st.lanes,
           st.acked_seq_max >= t2.seq && st.acked_seq_min <= st.acked_seq_max,
           st.vulnerable_us == UINT64_MAX ? "none" : "some", st.mirror);
    /* An older caller's shorter struct: only its bytes are written. */
    _Alignas(8) unsigned char small[32];
    memset(small, 0xAB, sizeof small);
    ((struct mojim_status *)small)->size = 16;
    report("status-short", mojim_status(h, (struct mojim_status *)small));
    int untouched = 1;
    for (int i = 16; i < 32; i++)
        untouched &= small[i] == 0xAB;
    printf("status-short-fields size=%u untouched=%d\n", ((struct mojim_status *)small)->size, untouched);

    /* Metrics: versioned like the status; five sync points show in the counters. */
    struct mojim_metrics m1, m2;
    memset(&m1, 0, sizeof m1);
    report("metrics-size-unset", mojim_metrics(h, &m1));
    report("metrics-null", mojim_metrics(h, NULL));
    m1.size = sizeof m1;
    report("metrics", mojim_metrics(h, &m1));
    for (int i = 0; i < 5; i++)
        mojim_msync_at(h, 4096, 8);
    m2.size = sizeof m2;
    report("metrics-after", mojim_metrics(h, &m2));
    uint64_t in_buckets = 0;
    for (int i = 0; i < MOJIM_METRICS_BUCKETS; i++)
        in_buckets += m2.sync_buckets[i];
    printf("metrics-fields size=%u mirror_state=%u lanes=%u count=%llu groups=%llu bytes=%llu buckets_ok=%d "
           "sum_ok=%d vulnerable=%s\n",
           m2.size, m2.mirror_state, m2.lanes, (unsigned long long)(m2.sync_count - m1.sync_count),
           (unsigned long long)(m2.groups_sent - m1.groups_sent),
           (unsigned long long)(m2.bytes_sent - m1.bytes_sent), in_buckets == m2.sync_count,
           m2.sync_sum_ns > m1.sync_sum_ns, m2.vulnerable_us == UINT64_MAX ? "none" : "some");
    fflush(stdout);

    threads(h, base);

    report("close-null", mojim_close(NULL));
    report("close", mojim_close(h));
    printf("strerror %s %s\n", mojim_strerror(MOJIM_EBUG), mojim_strerror(42));
    return 0;
}
