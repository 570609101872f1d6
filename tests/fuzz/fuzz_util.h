// fuzz_util.h: what the harnesses of tests/fuzz share. The readers take paths, so an input is
// written to an anonymous in-memory file (memfd_create) and the reader opens it by its
// /proc/self/fd/N name: no disk, nothing left behind. Readers of two files (IDX, .npy) get an
// input split in two, each part written as is or gzip-compressed first, so that both the plain
// and the gzip paths of the reader are fuzzed:
//   byte 0        flags: bit 0 compresses the first file, bit 1 the second
//   bytes 1-2     the first file's length L (little-endian; clamped to what is there)
//   bytes 3..3+L  the first file, the rest the second
// (A seed may also hold a gzip stream uncompressed by the flags, so that the compressed bytes
// themselves get mutated: gzread recognizes gzip by its magic, not by a file name.)
#ifndef VKT_FUZZ_UTIL_H
#define VKT_FUZZ_UTIL_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "vktrain.h"

// A finding: the reader broke its contract on this input. Says what, with the reader's message,
// and aborts (libFuzzer keeps the input as a crash).
static inline void fz_fail(const char *what) {
    fprintf(stderr, "%s: %s\n", what, vkt_error());
    abort();
}

// A memfd holding data[0..n); its path in path. Returns the fd (close it after), or -1.
static inline int fz_memfd(const uint8_t *data, size_t n, char *path, size_t size) {
    int fd = memfd_create("vkt_fuzz", MFD_CLOEXEC);
    if (fd < 0) {
        perror("memfd_create");
        abort(); // the machine, not the input: stop the fuzzer
    }
    for (size_t done = 0; done < n;) {
        ssize_t k = write(fd, data + done, n - done);
        if (k <= 0) {
            perror("write to memfd");
            abort();
        }
        done += (size_t)k;
    }
    snprintf(path, size, "/proc/self/fd/%d", fd);
    return fd;
}

// data[0..n) gzip-compressed into a malloc'd buffer; *out_n its length.
static inline uint8_t *fz_gzip(const uint8_t *data, size_t n, size_t *out_n) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    size_t cap = deflateBound(&z, (uLong)n) + 32;
    uint8_t *out = malloc(cap);
    if (!out) abort();
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
    *out_n = z.total_out;
    deflateEnd(&z);
    return out;
}

// Two files from one input (the layout above), each a memfd; paths in a and b.
typedef struct fz_pair {
    int fd[2];
    char path[2][64];
} fz_pair;

static inline void fz_pair_open(fz_pair *p, const uint8_t *data, size_t size) {
    uint8_t flags = size > 0 ? data[0] : 0;
    size_t len = size >= 3 ? (size_t)data[1] | (size_t)data[2] << 8 : 0;
    const uint8_t *body = size >= 3 ? data + 3 : data + size;
    size_t rest = size >= 3 ? size - 3 : 0;
    if (len > rest) len = rest;
    const uint8_t *part[2] = {body, body + len};
    size_t n[2] = {len, rest - len};
    for (int i = 0; i < 2; i++) {
        if (flags & (1u << i)) {
            size_t zn;
            uint8_t *z = fz_gzip(part[i], n[i], &zn);
            p->fd[i] = fz_memfd(z, zn, p->path[i], sizeof p->path[i]);
            free(z);
        } else {
            p->fd[i] = fz_memfd(part[i], n[i], p->path[i], sizeof p->path[i]);
        }
    }
}

static inline void fz_pair_close(fz_pair *p) {
    close(p->fd[0]);
    close(p->fd[1]);
}

#endif
