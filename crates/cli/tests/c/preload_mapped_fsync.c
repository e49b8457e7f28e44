/*
 * Stores through a mapping made durable by fsync and fdatasync, for tests/preload_descriptors.rs.
 * Run under libmojim_preload.so with LISTED in MOJIM_FILES:
 *   preload_mapped_fsync LISTED
 * LISTED is made 64 KiB long and mapped shared; bytes stored at 5000 are followed by fsync,
 * bytes stored at 40000 by fdatasync, then the line "synced" is printed; bytes stored at 60000
 * follow without a sync point, and the program waits to be killed. A failed check exits 1
 * naming its line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "line %d: %s failed (errno %d, %s)\n", __LINE__, #c, errno,           \
                    strerror(errno));                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define SIZE 65536

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, SIZE) == 0);
    char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    memcpy(p + 5000, "stored, then fsync", 18);
    CHECK(fsync(fd) == 0);
    memcpy(p + 40000, "stored, then fdatasync", 22);
    CHECK(fdatasync(fd) == 0);
    puts("synced");
    CHECK(fflush(stdout) == 0);
    memcpy(p + 60000, "stored, never synced", 20);
    for (;;)
        pause();
}
