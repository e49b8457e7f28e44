/* Every misuse of the C API the tests know of, one per line of output:
 *   NAME RC MESSAGE
 * then "ok" once the valid calls after them worked. Run with the path of a configuration
 * whose mirror runs. */
#include <mojim.h>
#include <stdio.h>
#include <string.h>

static void show(const char *name, int rc) {
    printf("%s %d %s\n", name, rc, rc == MOJIM_OK ? "" : mojim_last_error());
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: api_errors CONFIG\n");
        return 2;
    }
    struct mojim *m = NULL;
    show("open-null-path", mojim_open(NULL, 0, &m));
    show("open-null-out", mojim_open(argv[1], 0, NULL));
    show("open-missing", mojim_open("/nonexistent/mojim.toml", 0, &m));
    show("open-flags", mojim_open(argv[1], 0x10, &m));
    show("close-null", mojim_close(NULL));
    show("msync-null-handle", mojim_msync(NULL, NULL, 0));
    int rc = mojim_open(argv[1], 0, &m);
    if (rc != MOJIM_OK) {
        show("open", rc);
        return 1;
    }
    char *base = mojim_base(m);
    uint64_t size = mojim_size(m);
    char outside[8];
    show("msync-outside", mojim_msync(m, outside, sizeof outside));
    show("msync-past-end", mojim_msync(m, base + size - 4, 8));
    show("msync-at-past-end", mojim_msync_at(m, size, 1));
    show("gmsync-null-ranges", mojim_gmsync(m, NULL, 2));
    struct mojim_range mixed[2] = {{base, 8}, {outside, 8}};
    show("gmsync-one-outside", mojim_gmsync(m, mixed, 2));
    struct mojim_ticket bogus = {0};
    struct mojim_extent one = {0, 8};
    show("persist-null-ticket", mojim_persist(m, &one, 1, NULL));
    struct mojim_ticket t;
    memcpy(base, "C API ok", 8);
    rc = mojim_persist(m, &one, 1, &t);
    if (rc != MOJIM_OK) {
        show("persist", rc);
        return 1;
    }
    bogus = t;
    bogus.lane = 60000;
    show("wait-bogus-lane", mojim_wait(m, &bogus));
    show("wait-null-ticket", mojim_wait(m, NULL));
    struct mojim_status st;
    st.size = 0;
    show("status-size-0", mojim_status(m, &st));
    if ((rc = mojim_wait(m, &t)) != MOJIM_OK) {
        show("wait", rc);
        return 1;
    }
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if ((rc = mojim_status(m, &st)) != MOJIM_OK) {
        show("status", rc);
        return 1;
    }
    printf("status size=%u role=%u mode=%u mirror=%u lanes=%u region=%llu acked=%llu\n", st.size, st.role,
           st.mode, st.mirror, st.lanes, (unsigned long long)st.region_size,
           (unsigned long long)st.acked_seq);
    struct mojim_extent two[2] = {{0, 4}, {size - 4, 4}};
    if ((rc = mojim_gmsync_at(m, two, 2)) != MOJIM_OK) {
        show("gmsync-at", rc);
        return 1;
    }
    if ((rc = mojim_close(m)) != MOJIM_OK) {
        show("close", rc);
        return 1;
    }
    printf("ok\n");
    return 0;
}
