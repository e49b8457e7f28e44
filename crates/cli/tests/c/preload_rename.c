/*
 * Renaming and removing a listed file, for tests/preload_descriptors.rs. Run under
 * libmojim_preload.so with DIR/data in MOJIM_FILES:
 *   preload_rename DIR
 * The listed file gets "old contents"; renaming a temporary file onto it (rename, renameat,
 * renameat2), renaming it away or exchanging it, renaming DIR, and removing it (unlink,
 * unlinkat, remove) all fail with EBUSY and leave it as it was; other files in DIR are renamed
 * and removed as usual. Then its placeholder is removed behind the interposer's back: created
 * again with O_EXCL, the file is empty, and gets "fresh". Prints "ok" at the end; a failed
 * check exits 1 naming its line.
 */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "line %d: %s failed (errno %d, %s)\n", __LINE__, #c, errno,           \
                    strerror(errno));                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* `call` fails with EBUSY. */
#define BUSY(call)                                                                                 \
    do {                                                                                           \
        errno = 0;                                                                                 \
        CHECK((call) == -1 && errno == EBUSY);                                                     \
    } while (0)

static void put(const char *path, int flags, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | flags, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(fsync(fd) == 0);
    CHECK(close(fd) == 0);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    char listed[4096], tmp[4096], moved[4096], tmp2[4096], dir2[4096];
    snprintf(listed, sizeof listed, "%s/data", argv[1]);
    snprintf(tmp, sizeof tmp, "%s/data.tmp", argv[1]);
    snprintf(moved, sizeof moved, "%s/data.old", argv[1]);
    snprintf(tmp2, sizeof tmp2, "%s/other.tmp", argv[1]);
    snprintf(dir2, sizeof dir2, "%s.moved", argv[1]);
    put(listed, O_TRUNC, "old contents");
    put(tmp, O_TRUNC, "new contents");
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    CHECK(dir >= 0);

    BUSY(rename(tmp, listed));
    BUSY(renameat(AT_FDCWD, tmp, AT_FDCWD, listed));
    BUSY(renameat2(dir, "data.tmp", dir, "data", 0));
    BUSY(renameat2(dir, "data.tmp", dir, "data", RENAME_EXCHANGE));
    BUSY(rename(listed, moved));
    BUSY(rename(argv[1], dir2));
    BUSY(unlink(listed));
    BUSY(unlinkat(dir, "data", 0));
    BUSY(remove(listed));
    errno = 0;
    CHECK(open(listed, O_RDWR | O_CREAT | O_EXCL, 0644) == -1 && errno == EEXIST);

    /* Other files are renamed and removed as usual, and the listed file is as it was. */
    CHECK(rename(tmp, tmp2) == 0 && renameat(dir, "other.tmp", dir, "data.tmp") == 0);
    CHECK(unlink(tmp) == 0);
    int fd = open(listed, O_RDONLY);
    char b[64];
    CHECK(fd >= 0 && read(fd, b, sizeof b) == 12 && memcmp(b, "old contents", 12) == 0);
    CHECK(close(fd) == 0);

    /* The placeholder removed behind the interposer's back (by another program, say): a file
       created with O_EXCL is new, so empty. */
    CHECK(syscall(SYS_unlink, listed) == 0);
    fd = open(listed, O_RDWR | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0);
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0 && sb.st_size == 0 && read(fd, b, sizeof b) == 0);
    CHECK(write(fd, "fresh", 5) == 5 && fsync(fd) == 0);
    CHECK(close(fd) == 0 && close(dir) == 0);
    puts("ok");
    return 0;
}
