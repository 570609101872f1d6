// fuzz_checkpoint.c: libFuzzer harness of the safetensors reader (engine/run/checkpoint.c): the
// input is a checkpoint file; vkt_checkpoint_open checks its header, then every accessor is
// asked about everything the header holds, as a resume or `vktrain eval --init` would: the
// metadata (by index and by key), the tensor list (name, find, dtype, expect with its own shape
// and with another), and vkt_checkpoint_read of each tensor (with its element count, and with a
// wrong one, which must be refused). Open must give VKT_OK or VKT_ERR_FORMAT with a message.
#include "fuzz_util.h"

#include "checkpoint.h"
#include "vktrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fz_memfd(data, size, path, sizeof path);
    vkt_checkpoint *ck = NULL;
    vkt_status s = vkt_checkpoint_open(path, &ck);
    if (s != VKT_OK) {
        if ((s != VKT_ERR_FORMAT && s != VKT_ERR_HOST_MEMORY) || !*vkt_error() || ck)
            fz_fail("vkt_checkpoint_open returned another status, no message or a checkpoint");
        close(fd);
        return 0;
    }
    if (strcmp(vkt_checkpoint_path(ck), path) != 0) fz_fail("vkt_checkpoint_path");
    int nm = vkt_checkpoint_meta_count(ck);
    for (int i = -1; i <= nm; i++) {
        const char *k = NULL, *v = NULL;
        vkt_checkpoint_meta_at(ck, i, &k, &v);
        if ((i >= 0 && i < nm) != (k && v)) fz_fail("vkt_checkpoint_meta_at");
        if (k && vkt_checkpoint_meta(ck, k) != v) fz_fail("vkt_checkpoint_meta of a listed key");
    }
    if (vkt_checkpoint_meta(ck, "no such key \x01") != NULL) fz_fail("vkt_checkpoint_meta");
    int nt = vkt_checkpoint_tensor_count(ck);
    if (vkt_checkpoint_tensor_name(ck, -1) || vkt_checkpoint_tensor_name(ck, nt))
        fz_fail("vkt_checkpoint_tensor_name out of range");
    for (int i = 0; i < nt; i++) {
        const char *name = vkt_checkpoint_tensor_name(ck, i);
        int ndim = -1;
        uint64_t shape[VKT_CKPT_MAX_DIMS];
        if (!name || !vkt_checkpoint_find(ck, name, &ndim, shape) || ndim < 0 ||
            ndim > VKT_CKPT_MAX_DIMS)
            fz_fail("a listed tensor is not found");
        const char *dtype = vkt_checkpoint_dtype(ck, name);
        if (!dtype || (strcmp(dtype, "F32") != 0 && strcmp(dtype, "I64") != 0))
            fz_fail("vkt_checkpoint_dtype");
        if (vkt_checkpoint_expect(ck, name, ndim, shape) != VKT_OK)
            fz_fail("expect of its own shape");
        uint64_t other[VKT_CKPT_MAX_DIMS + 1] = {0};
        memcpy(other, shape, sizeof shape);
        other[0] ^= 1;
        if (vkt_checkpoint_expect(ck, name, ndim ? ndim : 1, other) == VKT_OK)
            fz_fail("expect of another shape");
        // The header's shape bounds the data by the file's own size (the ranges tile the file).
        uint64_t count = 1;
        for (int d = 0; d < ndim; d++)
            count *= shape[d];
        if (count > size) fz_fail("a tensor holds more elements than the file has bytes");
        float *dst = malloc((size_t)(count ? count : 1) * sizeof *dst);
        if (!dst) abort();
        s = vkt_checkpoint_read(ck, name, dst, count);
        // I64 values beyond 2^24 are refused (VKT_ERR_FORMAT); nothing else may fail.
        if (s != VKT_OK && !(s == VKT_ERR_FORMAT && strcmp(dtype, "I64") == 0))
            fz_fail("vkt_checkpoint_read");
        if (vkt_checkpoint_read(ck, name, dst, count + 1) != VKT_ERR_ARG)
            fz_fail("vkt_checkpoint_read with a wrong count");
        free(dst);
    }
    if (vkt_checkpoint_find(ck, "", NULL, NULL) ||
        vkt_checkpoint_expect(ck, "", 1, (uint64_t[]){1}) != VKT_ERR_FORMAT)
        fz_fail("an empty name is found");
    vkt_checkpoint_close(ck);
    close(fd);
    return 0;
}
