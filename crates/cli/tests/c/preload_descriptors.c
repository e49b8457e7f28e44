/*
 * A listed file's descriptor closed behind the interposer's back, for tests/preload_descriptors.rs.
 * Run under libmojim_preload.so with LISTED in MOJIM_FILES:
 *   preload_descriptors LISTED OTHER THIRD
 * (OTHER and THIRD: ordinary files, made or emptied here). The listed file's descriptor is
 * closed by a raw system call, which the interposer does not see, and its number is reused by
 * open() of OTHER, a pipe, a socket pair, fopen() of THIRD, dup2(), and a raw openat() of
 * THIRD: each time, the new descriptor's calls must reach the new file, not the listed file's
 * slot. fdopen() of a listed descriptor is refused. Prints "ok" at the end; a failed check
 * exits 1 naming its line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

static const char HEADER[] = "the replicated file's header";
#define HEADER_LEN ((ssize_t)sizeof HEADER - 1)

static const char *listed;

/* The listed file, opened again: its number is the lowest free one. */
static int open_listed(void)
{
    int fd = open(listed, O_RDWR);
    CHECK(fd >= 0);
    return fd;
}

/* Closes `fd` without close(): the interposer does not see it. */
static void raw_close(int fd)
{
    CHECK(syscall(SYS_close, fd) == 0);
}

/* Bytes written to one end of a pair come out of the other. */
static void through(int in, int out)
{
    char b[16];
    CHECK(write(in, "passed", 6) == 6);
    CHECK(read(out, b, sizeof b) == 6 && memcmp(b, "passed", 6) == 0);
}

int main(int argc, char **argv)
{
    CHECK(argc == 4);
    listed = argv[1];
    const char *other = argv[2], *third = argv[3];
    int fd = open(listed, O_RDWR | O_CREAT, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, HEADER, HEADER_LEN) == HEADER_LEN);
    CHECK(fsync(fd) == 0);

    /* A stream on it would read and write the placeholder on disk. */
    errno = 0;
    CHECK(fdopen(fd, "r+") == NULL && errno == EOPNOTSUPP);

    /* open() of another file takes the number: the writes are that file's. */
    raw_close(fd);
    int o = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(o == fd);
    CHECK(write(o, "other file", 10) == 10);
    CHECK(fsync(o) == 0);
    struct stat sb;
    CHECK(fstat(o, &sb) == 0 && sb.st_size == 10);
    CHECK(close(o) == 0);

    /* A pipe, a socket pair. */
    fd = open_listed();
    raw_close(fd);
    int p[2];
    CHECK(pipe(p) == 0 && (p[0] == fd || p[1] == fd));
    through(p[1], p[0]);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
    fd = open_listed();
    raw_close(fd);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, p) == 0 && (p[0] == fd || p[1] == fd));
    through(p[0], p[1]);
    through(p[1], p[0]);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);

    /* fopen() opens its descriptor inside the C library. */
    fd = open_listed();
    raw_close(fd);
    FILE *f = fopen(third, "w");
    CHECK(f != NULL && fileno(f) == fd);
    CHECK(write(fileno(f), "via fopen", 9) == 9);
    CHECK(fclose(f) == 0);

    /* dup2() of another file onto a listed descriptor. */
    fd = open_listed();
    o = open(other, O_RDWR | O_APPEND);
    CHECK(o >= 0 && dup2(o, fd) == fd);
    CHECK(write(fd, "+dup2", 5) == 5);
    CHECK(close(fd) == 0 && close(o) == 0);

    /* A number reused where the interposer cannot see it (a raw openat): the calls that check the
       descriptor's identity find the other file, drop the stale entry and pass the call on. */
    fd = open_listed();
    raw_close(fd);
    int r = (int)syscall(SYS_openat, AT_FDCWD, third, O_RDWR | O_TRUNC);
    CHECK(r == fd);
    CHECK(fstat(r, &sb) == 0 && sb.st_size == 0);
    CHECK(ftruncate(r, 5) == 0);
    CHECK(write(r, "raw", 3) == 3);
    CHECK(fsync(r) == 0);
    CHECK(close(r) == 0);

    /* The listed file kept its bytes. */
    fd = open_listed();
    char b[64];
    CHECK(pread(fd, b, sizeof b, 0) == HEADER_LEN && memcmp(b, HEADER, HEADER_LEN) == 0);
    CHECK(fstat(fd, &sb) == 0 && sb.st_size == HEADER_LEN);
    CHECK(fsync(fd) == 0);
    CHECK(close(fd) == 0);
    puts("ok");
    return 0;
}
