/*
 * Bad input to recoverable memory's C API, for tests/rvm_c.rs. Each case prints one line,
 *   CASE CODE_NAME MESSAGE
 * (MESSAGE: mojim_last_error() after a failure, "-" after a success), and lines of facts the
 * test checks ("ptr CASE 0x...": the pointer a case passed; "KEY VALUE" comparisons made here).
 * After the bad calls the memory is destroyed and created again: what was committed before
 * them is all there, and nothing else ("intact OK"). Then THREADS threads share the handle,
 * each allocating, writing and committing its own list ("threads OK"), found again after a
 * second recovery ("threads-recovered OK").
 *
 * Usage: rvm_bad_input CONFIG BASE   (BASE: the config's [rvm] base, in hex; fresh memory)
 *        rvm_bad_input CONFIG open   (one rvm_cfg_create; its case line is "open")
 */
#define _GNU_SOURCE
#include <mojim.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define THREADS 4
#define ROUNDS 50
#define FILLER (256 << 10)

static void report(const char *name, int rc)
{
    printf("%s %s %s\n", name, mojim_strerror(rc), rc == MOJIM_OK ? "-" : mojim_last_error());
    fflush(stdout);
}

/* For calls that return a pointer: NULL is a failure whose code mojim_last_error_code() has. */
static void report_ptr(const char *name, const void *p)
{
    report(name, p != NULL ? MOJIM_OK : mojim_last_error_code());
}

static void fact(const char *key, int ok)
{
    printf("%s %s\n", key, ok ? "OK" : "FAILED");
    fflush(stdout);
}

static void die(const char *what)
{
    printf("fatal %s: %s\n", what, mojim_last_error());
    exit(1);
}

static rvm_status_t status(rvm_cfg_t *cfg)
{
    rvm_status_t st = {.size = sizeof st};
    if (rvm_status(cfg, &st) != MOJIM_OK)
        die("rvm_status");
    return st;
}

/* What the allocator holds, for "changes nothing". */
static int same_allocation(const rvm_status_t *a, const rvm_status_t *b)
{
    return a->used == b->used && a->blocks == b->blocks && a->seq == b->seq;
}

struct root {
    char greeting[64];
    unsigned char *big; /* 20000 bytes, byte i = i % 251 */
    struct item *lists[THREADS];
};

struct item {
    uint64_t value;
    struct item *next;
};

static int big_ok(const unsigned char *big)
{
    for (int i = 0; i < 20000; i++)
        if (big[i] != i % 251)
            return 0;
    return 1;
}

struct worker {
    rvm_cfg_t *cfg;
    struct root *root;
    int t;
    int failed; /* the first failing code, 0 if none */
};

static void *work(void *arg)
{
    struct worker *w = arg;
    for (uint64_t i = 1; i <= ROUNDS && w->failed == 0; i++) {
        struct item *it = rvm_alloc(w->cfg, sizeof *it);
        if (it == NULL) {
            w->failed = mojim_last_error_code();
            break;
        }
        it->value = (uint64_t)w->t * 1000 + i;
        it->next = w->root->lists[w->t];
        w->root->lists[w->t] = it;
        w->failed = rvm_txn_commit(w->cfg);
    }
    if (w->failed != 0)
        fprintf(stderr, "thread %d: %s\n", w->t, mojim_last_error());
    return NULL;
}

/* Each thread's list holds its ROUNDS values, newest first. */
static int lists_ok(const struct root *r)
{
    for (int t = 0; t < THREADS; t++) {
        uint64_t want = ROUNDS;
        for (const struct item *it = r->lists[t]; it != NULL; it = it->next, want--)
            if (it->value != (uint64_t)t * 1000 + want)
                return 0;
        if (want != 0)
            return 0;
    }
    return 1;
}

static void threads(rvm_cfg_t *cfg, struct root *r)
{
    pthread_t tid[THREADS];
    struct worker w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (struct worker){.cfg = cfg, .root = r, .t = t, .failed = 0};
        if (pthread_create(&tid[t], NULL, work, &w[t]) != 0)
            die("pthread_create");
    }
    int rc = MOJIM_OK;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        if (w[t].failed != 0)
            rc = w[t].failed;
    }
    printf("threads %s\n", rc != MOJIM_OK ? mojim_strerror(rc) : lists_ok(r) ? "OK" : "WRONG");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: rvm_bad_input CONFIG BASE|open\n");
        return 2;
    }
    const char *config = argv[1];
    if (strcmp(argv[2], "open") == 0) {
        rvm_cfg_t *cfg = rvm_cfg_create(config, NULL);
        report_ptr("open", cfg);
        return cfg != NULL && rvm_cfg_destroy(cfg) != MOJIM_OK;
    }
    void *base = (void *)(uintptr_t)strtoull(argv[2], NULL, 16);

    /* rvm_cfg_create */
    report_ptr("create-null-path", rvm_cfg_create(NULL, NULL));
    report_ptr("create-missing-config", rvm_cfg_create("/nonexistent/rvm-c-test.toml", NULL));
    rvm_options_t opts = {0};
    report_ptr("create-options-size-unset", rvm_cfg_create(config, &opts));
    opts = (rvm_options_t){.size = sizeof opts, .flags = 6};
    report_ptr("create-options-unknown-flags", rvm_cfg_create(config, &opts));
    opts = (rvm_options_t){.size = sizeof opts, .tracking = 9};
    report_ptr("create-options-bad-tracking", rvm_cfg_create(config, &opts));
    void *taken = mmap(base, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (taken != base)
        die("mmap at the base");
    report_ptr("create-address-taken", rvm_cfg_create(config, NULL));
    munmap(taken, 4096);
    opts = (rvm_options_t){.size = sizeof opts, .tracking = RVM_TRACKING_CONFIG};
    rvm_cfg_t *cfg = rvm_cfg_create(config, &opts);
    report_ptr("create", cfg);
    if (cfg == NULL)
        return 1;
    fact("create-at-base", status(cfg).base == (uint64_t)(uintptr_t)base && status(cfg).recovered == 0);
    report_ptr("create-twice", rvm_cfg_create(config, NULL));

    /* State committed before the bad calls. */
    struct root *r = rvm_alloc(cfg, sizeof *r);
    report_ptr("alloc", r);
    if (r == NULL)
        return 1;
    strcpy(r->greeting, "hello from recoverable memory");
    if ((r->big = rvm_alloc(cfg, 20000)) == NULL)
        die("rvm_alloc 20000");
    for (int i = 0; i < 20000; i++)
        r->big[i] = (unsigned char)(i % 251);
    report("set-usr-data", rvm_set_usr_data(cfg, r));
    report("txn-start", rvm_txn_start(cfg));
    report("commit", rvm_txn_commit(cfg));
    rvm_status_t before = status(cfg);

    /* rvm_alloc */
    report_ptr("alloc-null-handle", rvm_alloc(NULL, 8));
    uint64_t too_large = before.capacity * 2;
    printf("size alloc-too-large %" PRIu64 "\n", too_large);
    report_ptr("alloc-too-large", rvm_alloc(cfg, too_large));
    rvm_status_t after = status(cfg);
    fact("alloc-too-large-changes-nothing", same_allocation(&before, &after));
    void *fillers[256];
    int n = 0;
    while (n < 256 && (fillers[n] = rvm_alloc(cfg, FILLER)) != NULL)
        n++;
    report_ptr("alloc-full", n < 256 ? NULL : fillers[0]);
    printf("fillers %d\n", n);
    rvm_status_t full = status(cfg);
    report_ptr("alloc-full-again", rvm_alloc(cfg, FILLER));
    after = status(cfg);
    fact("alloc-full-changes-nothing", same_allocation(&full, &after));
    report("free-filler", n > 0 ? rvm_free(cfg, fillers[--n]) : MOJIM_EBUG);
    void *again = rvm_alloc(cfg, FILLER);
    report_ptr("alloc-after-free", again);
    fact("alloc-after-free-reuses", again == fillers[n]);
    if (again != NULL)
        fillers[n++] = again;
    for (int i = 0; i < n; i++)
        if (rvm_free(cfg, fillers[i]) != MOJIM_OK)
            die("rvm_free of a filler");

    /* rvm_free */
    int on_stack = 0;
    printf("ptr free-stack %p\n", (void *)&on_stack);
    report("free-stack", rvm_free(cfg, &on_stack));
    void *heap = malloc(64);
    printf("ptr free-malloc %p\n", heap);
    report("free-malloc", rvm_free(cfg, heap));
    free(heap);
    printf("ptr free-inside %p\n", (void *)(r->greeting + 16));
    report("free-inside", rvm_free(cfg, r->greeting + 16));
    void *large = rvm_alloc(cfg, 8192);
    report("free-large", rvm_free(cfg, large));
    printf("ptr free-large-twice %p\n", large);
    report("free-large-twice", rvm_free(cfg, large));
    report("free-null-ptr", rvm_free(cfg, NULL));
    report("free-null-handle", rvm_free(NULL, r));

    /* The root */
    printf("ptr set-usr-data-foreign %p\n", (void *)&on_stack);
    report("set-usr-data-foreign", rvm_set_usr_data(cfg, &on_stack));
    fact("set-usr-data-foreign-changes-nothing", rvm_get_usr_data(cfg) == r);
    report("set-usr-data-null-handle", rvm_set_usr_data(NULL, r));
    report_ptr("get-usr-data-null-handle", rvm_get_usr_data(NULL));

    /* Transactions, status, handles */
    report("txn-start-null-handle", rvm_txn_start(NULL));
    report("commit-null-handle", rvm_txn_commit(NULL));
    report("status-null-out", rvm_status(cfg, NULL));
    rvm_status_t st = {.size = 0};
    report("status-size-unset", rvm_status(cfg, &st));
    st.size = sizeof st;
    report("status-null-handle", rvm_status(NULL, &st));
    uint64_t forged[128] = {0}; /* 1 KiB: larger than a handle (a unit test of crates/ffi checks) */
    report("commit-forged-handle", rvm_txn_commit((rvm_cfg_t *)forged));
    report("destroy-null", rvm_cfg_destroy(NULL));

    /* What was committed is there, and nothing the bad calls might have done. */
    report("commit-after", rvm_txn_commit(cfg));
    rvm_status_t end = status(cfg);
    printf("blocks %" PRIu64 " -> %" PRIu64 "\n", before.blocks, end.blocks);
    report("destroy", rvm_cfg_destroy(cfg));
    cfg = rvm_cfg_create(config, NULL);
    report_ptr("recreate", cfg);
    if (cfg == NULL)
        return 1;
    rvm_status_t back = status(cfg);
    r = rvm_get_usr_data(cfg);
    fact("intact", back.recovered == 1 && back.blocks == end.blocks && back.used == end.used && r != NULL &&
                       strcmp(r->greeting, "hello from recoverable memory") == 0 && big_ok(r->big));

    /* Threads sharing the handle. */
    threads(cfg, r);
    report("destroy-after-threads", rvm_cfg_destroy(cfg));
    cfg = rvm_cfg_create(config, NULL);
    if (cfg == NULL)
        die("rvm_cfg_create after the threads");
    r = rvm_get_usr_data(cfg);
    fact("threads-recovered", r != NULL && lists_ok(r));
    report("destroy-last", rvm_cfg_destroy(cfg));
    return 0;
}
