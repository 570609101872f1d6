// fuzz_dataset_check.h: what fuzz_idx and fuzz_npy ask of a data set a reader returned: that a
// run accepts it (vkt_dataset_check: labels below classes, finite features, sizes that do not
// overflow), and that the batcher walks it (one shuffled batch gathered).
#ifndef VKT_FUZZ_DATASET_CHECK_H
#define VKT_FUZZ_DATASET_CHECK_H

#include "data.h"

static inline void fz_check_dataset(vkt_dataset *ds, const char *reader) {
    if (vkt_dataset_check(ds, reader) != VKT_OK) {
        fprintf(stderr, "%s gave a set that vkt_dataset_check refuses: %s\n", reader, vkt_error());
        abort();
    }
    vkt_batcher b;
    if (vkt_batcher_init(&b, ds, 3, true, 7) != VKT_OK) {
        fprintf(stderr, "vkt_batcher_init on a set of %s: %s\n", reader, vkt_error());
        abort();
    }
    uint32_t tps = vkt_dataset_targets(ds);
    float *x = malloc((size_t)3 * ds->features * sizeof *x);
    uint32_t *y = malloc((size_t)3 * tps * sizeof *y);
    if (!x || !y) abort();
    uint32_t rows = vkt_batcher_get(&b, vkt_batcher_count(&b) - 1, x, y);
    if (rows == 0 || rows > 3) {
        fprintf(stderr, "the last batch of %u samples has %u rows\n", ds->n, rows);
        abort();
    }
    free(x);
    free(y);
    vkt_batcher_free(&b);
}

#endif
