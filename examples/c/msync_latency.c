/* Latency of one mojim_msync_at of SIZE bytes at random offsets, as `mojim bench` measures
 * Rust's Primary::msync: to compare the C layer with the Rust call it wraps.
 *
 * usage: msync_latency CONFIG SIZE OPS
 *
 * Prints "p50_us=… mean_us=…" over OPS calls (after OPS/10 untimed). */
#include <mojim.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: msync_latency CONFIG SIZE OPS\n");
        return 2;
    }
    uint64_t size = strtoull(argv[2], NULL, 10), ops = strtoull(argv[3], NULL, 10);
    struct mojim *m;
    int rc = mojim_open(argv[1], 0, &m);
    if (rc != MOJIM_OK) {
        fprintf(stderr, "msync_latency: %s\n", mojim_last_error());
        return 1;
    }
    uint64_t slots = mojim_size(m) / size, x = 88172645463325252ull, total = 0;
    uint64_t *lat = malloc(ops * sizeof *lat);
    char *base = mojim_base(m);
    for (uint64_t i = 0; i < ops + ops / 10; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t off = (x % slots) * size;
        base[off] = (char)i;
        uint64_t t0 = now_ns();
        if ((rc = mojim_msync_at(m, off, size)) != MOJIM_OK) {
            fprintf(stderr, "msync_latency: %s\n", mojim_last_error());
            return 1;
        }
        uint64_t t = now_ns() - t0;
        if (i >= ops / 10) {
            lat[i - ops / 10] = t;
            total += t;
        }
    }
    qsort(lat, ops, sizeof *lat, by_value);
    printf("p50_us=%.3f mean_us=%.3f\n", lat[ops / 2] / 1e3, total / 1e3 / ops);
    return mojim_close(m) == MOJIM_OK ? 0 : 1;
}
