/*
 * rvm_counter.c: a counter in recoverable memory that survives kill -9 (docs/RVM.md,
 * "Recoverable memory").
 *
 * It prints the counter after each commit, counting up until killed. Run again on the same
 * configuration, it goes on from the last commit: the first number it prints is the last one
 * the killed run printed, or the one after (killed between a commit and its printf).
 *
 *   cargo build -p mojim-capi --release
 *   cc -Iinclude examples/c/rvm_counter.c -Ltarget/release -Wl,-rpath,$PWD/target/release -lmojim
 *   ./a.out node/mojim.toml
 */
#include <mojim.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    rvm_cfg_t *cfg = rvm_cfg_create(argc > 1 ? argv[1] : "mojim.toml", NULL); /* recovers */
    unsigned long *n = cfg ? rvm_get_usr_data(cfg) : NULL; /* the root, as last committed */
    if (cfg && !n && (n = rvm_alloc(cfg, sizeof *n)))      /* the first run: zeroed */
        rvm_set_usr_data(cfg, n);
    while (n && rvm_txn_commit(cfg) == MOJIM_OK) {         /* the pages written, atomically */
        printf("%lu\n", *n);
        fflush(stdout);
        *n += 1;                                           /* an ordinary store */
    }
    fprintf(stderr, "rvm_counter: %s\n", mojim_last_error());
    return 1;
}
