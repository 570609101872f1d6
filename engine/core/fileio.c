// fileio.c: files replaced atomically (checkpoints, the tuning and pipeline caches). The writer
// writes a temporary file "<path>.tmp.<pid>" beside the target, fsyncs it, renames it over the
// target and fsyncs the directory: a reader sees the old file or the new one, never a part, and a
// crash leaves at most a temporary file, which the next writer of that path removes.
//
// A test hook (vkt_test_set_crash_hook; the CLI's VKT_TEST_CRASH_AFTER_BYTES=N) makes the writer
// kill itself (SIGKILL) after N bytes, so tests can check that a crash mid-write keeps the
// previous file.
//
// Only a regular file (or nothing) is replaced: a target that is a symbolic link, a directory, a
// device or a FIFO is refused before anything is written (a rename would replace the link itself
// and a device node run as root). The temporary file is created exclusively (O_EXCL, O_NOFOLLOW),
// so a link planted at its name is not followed.
//
// Not here: locking between processes (two writers of one path each rename a complete file; the
// last one wins).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "vkt_internal.h"

// Writes all of buf to fd. *budget is the number of bytes that may still be written before the
// process kills itself (UINT64_MAX: no limit).
static bool write_all(int fd, const void *buf, uint64_t n, uint64_t *budget) {
    const char *p = buf;
    while (n) {
        if (*budget == 0) raise(SIGKILL); // the bytes written so far are in the page cache
        size_t k = n > (1u << 30) ? (1u << 30) : (size_t)n;
        if (*budget != UINT64_MAX && k > *budget) k = (size_t)*budget;
        ssize_t w = write(fd, p, k);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        n -= (uint64_t)w;
        if (*budget != UINT64_MAX) *budget -= (uint64_t)w;
    }
    if (*budget == 0) raise(SIGKILL);
    return true;
}

static void split_dir(const char *path, char *dir, size_t size, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, size, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(dir, size, "/");
        *base = slash + 1;
    } else {
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

// Removes "<base>.tmp.<pid>" files of dir whose writer no longer runs: what a killed writer left
// behind. Best effort: failures are ignored, and a live writer's file is never touched (in
// another pid namespace sharing this directory, a live writer could be taken for dead; its
// rename would then fail and report it, leaving the old file in place).
bool vkt_dead_writer_temp(const char *name, const char *base) {
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0) return false;
    const char *digits = name + bl + 5;
    if (!*digits || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9)
        return false;
    pid_t pid = (pid_t)atol(digits);
    return pid > 0 && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH;
}

static void remove_stale_temps(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (!vkt_dead_writer_temp(n, base)) continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", dir, n);
        unlink(full);
    }
    closedir(d);
}

static vkt_status io_fail(const char *what, const char *path, const char *tmp, const char *step,
                          int err) {
    return vkt_fail(VKT_ERR_IO,
                    "cannot write %s %s: %s %s failed: %s (the previous %s, if any, is untouched; "
                    "free disk space or choose another path)",
                    what, path, step, tmp, strerror(err), what);
}

static vkt_crash_hook crash_hook; // atomic: set by the CLI or a test, read by any writer

void vkt_test_set_crash_hook(vkt_crash_hook hook) {
    __atomic_store_n(&crash_hook, hook, __ATOMIC_RELEASE);
}

vkt_status vkt_write_file_atomic(const char *path, const vkt_chunk *chunks, int nchunks,
                                 const char *what) {
    vkt_crash_hook hook = __atomic_load_n(&crash_hook, __ATOMIC_ACQUIRE);
    uint64_t budget = hook ? hook() : UINT64_MAX;

    char dir[4096], tmp[4200];
    const char *base;
    split_dir(path, dir, sizeof dir, &base);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return vkt_fail(VKT_ERR_IO,
                        "cannot write %s %s: it exists and is not a regular file (%s); vktrain "
                        "replaces only files, so nothing was written: choose another path",
                        what, path,
                        S_ISLNK(st.st_mode)   ? "a symbolic link"
                        : S_ISDIR(st.st_mode) ? "a directory"
                                              : "a device, FIFO or socket");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    remove_stale_temps(dir, base);
    unlink(tmp); // this process's own leftover (a write that failed before its rename)

    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return io_fail(what, path, tmp, "creating", errno);
    bool ok = true;
    for (int i = 0; i < nchunks && ok; i++)
        ok = write_all(fd, chunks[i].data, chunks[i].size, &budget);
    const char *step = "writing";
    if (ok) {
        step = "syncing";
        ok = fsync(fd) == 0;
    }
    int err = errno;
    if (close(fd) != 0 && ok) {
        step = "closing";
        err = errno;
        ok = false;
    }
    if (ok && rename(tmp, path) != 0) {
        step = "renaming";
        err = errno;
        ok = false;
    }
    if (!ok) {
        unlink(tmp);
        return io_fail(what, path, tmp, step, err);
    }
    // Make the rename itself durable. The new file is already in place; a failure here is
    // reported because a power loss could still bring the old one back.
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        err = errno;
        if (dfd >= 0) close(dfd);
        return vkt_fail(VKT_ERR_IO, "%s %s was written but syncing its directory %s failed: %s",
                        what, path, dir, strerror(err));
    }
    close(dfd);
    return VKT_OK;
}

vkt_status vkt_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return vkt_fail(VKT_ERR_ARG, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return vkt_fail(VKT_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
        *p = c;
        if (!c) break;
    }
    return VKT_OK;
}

// Opens path read-only without blocking on a FIFO, and keeps it only if it is a regular file: -1
// with errno from open(2), or with *kind naming what the path is instead.
static int open_regular(const char *path, const char **kind) {
    *kind = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        *kind = S_ISFIFO(st.st_mode)   ? "a FIFO (named pipe)"
                : S_ISDIR(st.st_mode)  ? "a directory"
                : S_ISCHR(st.st_mode)  ? "a character device"
                : S_ISBLK(st.st_mode)  ? "a block device"
                : S_ISSOCK(st.st_mode) ? "a socket"
                                       : "not a regular file";
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int vkt_open_input(const char *path, const char *what, const char *hint) {
    const char *kind;
    int fd = open_regular(path, &kind);
    if (fd >= 0) return fd;
    if (kind)
        vkt_fail(VKT_ERR_IO,
                 "%s %s is %s, not a regular file: vktrain reads its inputs only from regular "
                 "files (copy the data into one)",
                 what, path, kind);
    else
        vkt_fail(VKT_ERR_IO, "cannot open %s %s: %s%s%s", what, path, strerror(errno),
                 hint ? " " : "", hint ? hint : "");
    return -1;
}

void *vkt_read_file(const char *path, size_t max, size_t *size) {
    *size = 0;
    const char *kind;
    int fd = open_regular(path, &kind);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            if (cap > max + 1) cap = max + 1;
            char *nb = realloc(buf, cap + 1);
            if (!nb) break;
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0 || n > max) break;
    }
    bool bad = ferror(f) || n > max || !buf;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *size = n;
    return buf;
}
