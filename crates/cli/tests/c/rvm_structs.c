/*
 * Pointer-rich state in recoverable memory, found again at the same addresses after SIGKILL,
 * for tests/rvm_c.rs: a linked list and a binary search tree whose nodes each own a name of
 * their own size (16 bytes to past a page: small and large blocks), all reached from the root
 * rvm_get_usr_data returns.
 *
 *   rvm_structs CONFIG build N      builds N list nodes and N tree nodes, commits, prints
 *                                   "committed DIGEST", then changes more without committing,
 *                                   prints "dirty DIGEST", and waits to be killed
 *   rvm_structs CONFIG check        recovers, prints "recovered DIGEST", destroys, exits 0
 *   rvm_structs CONFIG grow M       recovers, prints "recovered DIGEST"; frees every other list
 *                                   node and renames every third tree node (freeing the old
 *                                   name), adds M to each, commits, prints "committed DIGEST",
 *                                   then as build
 *
 * DIGEST: root=P list_len=N list_sum=S list_addrs=H tree_len=N tree_sum=S tree_addrs=H
 * depth=D sorted=0|1 names=0|1, where the *_addrs are hashes of every node's and name's
 * address in walk order: equal digests mean the same structures at the same addresses.
 */
#define _GNU_SOURCE
#include <mojim.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct lnode {
    uint64_t value;
    struct lnode *next;
};

struct tnode {
    uint64_t key;
    struct tnode *left, *right;
    char *name; /* name_of(key, generation), its own block */
    uint64_t generation;
};

struct root {
    struct lnode *list;
    struct tnode *tree;
    uint64_t next_value; /* the next list value and tree key seed */
};

static rvm_cfg_t *cfg;

static void fail(const char *what)
{
    fprintf(stderr, "rvm_structs: %s failed: %s (%s)\n", what, mojim_last_error(),
            mojim_strerror(mojim_last_error_code()));
    exit(1);
}

static void *alloc(size_t n)
{
    void *p = rvm_alloc(cfg, n);
    if (p == NULL)
        fail("rvm_alloc");
    return p;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A name's length: 16 bytes to 6 KiB, from the key and generation. */
static size_t name_len(uint64_t key, uint64_t gen)
{
    return 16 + mix(key ^ (gen << 40)) % 6000;
}

static void fill_name(char *name, uint64_t key, uint64_t gen)
{
    size_t n = name_len(key, gen);
    int head = snprintf(name, n, "key-%" PRIu64 "-gen-%" PRIu64 "-", key, gen);
    for (size_t i = (size_t)head; i + 1 < n; i++)
        name[i] = (char)('a' + (key + i) % 26);
    name[n - 1] = '\0';
}

static int name_ok(const struct tnode *t)
{
    size_t n = name_len(t->key, t->generation);
    char *want = malloc(n);
    if (want == NULL)
        exit(1);
    fill_name(want, t->key, t->generation);
    int ok = strlen(t->name) == n - 1 && memcmp(want, t->name, n) == 0;
    free(want);
    return ok;
}

static void set_name(struct tnode *t, uint64_t gen)
{
    t->generation = gen;
    t->name = alloc(name_len(t->key, gen));
    fill_name(t->name, t->key, gen);
}

static void push(struct root *r)
{
    struct lnode *n = alloc(sizeof *n);
    n->value = r->next_value;
    n->next = r->list;
    r->list = n;
}

static void insert(struct root *r)
{
    uint64_t key = mix(r->next_value) % 1000000007ull;
    struct tnode **at = &r->tree;
    while (*at != NULL) {
        if ((*at)->key == key)
            return; /* already there */
        at = key < (*at)->key ? &(*at)->left : &(*at)->right;
    }
    struct tnode *t = alloc(sizeof *t);
    t->key = key;
    t->left = t->right = NULL;
    set_name(t, 0);
    *at = t;
}

static void add(struct root *r, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        push(r);
        insert(r);
        r->next_value++;
    }
}

struct digest {
    uint64_t list_len, list_sum, list_addrs, tree_len, tree_sum, tree_addrs;
    int depth, sorted, names;
    uint64_t last_key;
    int have_last;
};

static uint64_t hash_in(uint64_t h, const void *p)
{
    return mix(h ^ (uint64_t)(uintptr_t)p);
}

static void walk(const struct tnode *t, int depth, struct digest *d)
{
    if (t == NULL)
        return;
    if (depth > d->depth)
        d->depth = depth;
    walk(t->left, depth + 1, d);
    if (d->have_last && t->key <= d->last_key)
        d->sorted = 0;
    d->last_key = t->key;
    d->have_last = 1;
    d->tree_len++;
    d->tree_sum += t->key;
    d->tree_addrs = hash_in(hash_in(d->tree_addrs, t), t->name);
    if (!name_ok(t))
        d->names = 0;
    walk(t->right, depth + 1, d);
}

static void print_digest(const char *what, const struct root *r)
{
    struct digest d = {.sorted = 1, .names = 1};
    for (const struct lnode *n = r->list; n != NULL; n = n->next) {
        d.list_len++;
        d.list_sum += n->value;
        d.list_addrs = hash_in(d.list_addrs, n);
    }
    walk(r->tree, 1, &d);
    printf("%s root=%p list_len=%" PRIu64 " list_sum=%" PRIu64 " list_addrs=%016" PRIx64
           " tree_len=%" PRIu64 " tree_sum=%" PRIu64 " tree_addrs=%016" PRIx64 " depth=%d sorted=%d names=%d\n",
           what, (const void *)r, d.list_len, d.list_sum, d.list_addrs, d.tree_len, d.tree_sum, d.tree_addrs,
           d.depth, d.sorted, d.names);
    fflush(stdout);
}

static void commit(void)
{
    if (rvm_txn_commit(cfg) != MOJIM_OK)
        fail("rvm_txn_commit");
}

/* Changes made and never committed: a recovery must not see them. Then waits for SIGKILL. */
static void dirty_and_wait(struct root *r)
{
    r->list->value += 1000000;
    add(r, 50);
    print_digest("dirty", r);
    for (;;)
        pause();
}

/* Renames every third tree node (in walk order), freeing its old name. */
static void rename_nodes(struct tnode *t, uint64_t *i)
{
    if (t == NULL)
        return;
    rename_nodes(t->left, i);
    if ((*i)++ % 3 == 0) {
        if (rvm_free(cfg, t->name) != MOJIM_OK)
            fail("rvm_free of a name");
        set_name(t, t->generation + 1);
    }
    rename_nodes(t->right, i);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: rvm_structs CONFIG build N | check | grow M\n");
        return 2;
    }
    if ((cfg = rvm_cfg_create(argv[1], NULL)) == NULL)
        fail("rvm_cfg_create");
    struct root *r = rvm_get_usr_data(cfg);
    if (strcmp(argv[2], "build") == 0 && argc == 4) {
        if (r != NULL) {
            fprintf(stderr, "rvm_structs: build on recoverable memory that holds a root already\n");
            return 1;
        }
        r = alloc(sizeof *r);
        r->list = NULL;
        r->tree = NULL;
        r->next_value = 1;
        if (rvm_set_usr_data(cfg, r) != MOJIM_OK)
            fail("rvm_set_usr_data");
        add(r, strtoull(argv[3], NULL, 10));
        commit();
        print_digest("committed", r);
        dirty_and_wait(r);
    }
    if (r == NULL) {
        fprintf(stderr, "rvm_structs: no root: nothing was committed\n");
        return 1;
    }
    print_digest("recovered", r);
    if (strcmp(argv[2], "check") == 0) {
        if (rvm_cfg_destroy(cfg) != MOJIM_OK)
            fail("rvm_cfg_destroy");
        return 0;
    }
    if (strcmp(argv[2], "grow") != 0 || argc != 4) {
        fprintf(stderr, "rvm_structs: unknown command %s\n", argv[2]);
        return 2;
    }
    /* Free every other list node: small blocks back on the free lists, reused by add. */
    for (struct lnode *n = r->list; n != NULL && n->next != NULL; n = n->next) {
        struct lnode *gone = n->next;
        n->next = gone->next;
        if (rvm_free(cfg, gone) != MOJIM_OK)
            fail("rvm_free of a list node");
    }
    uint64_t i = 0;
    rename_nodes(r->tree, &i);
    add(r, strtoull(argv[3], NULL, 10));
    commit();
    print_digest("committed", r);
    dirty_and_wait(r);
    return 0;
}
