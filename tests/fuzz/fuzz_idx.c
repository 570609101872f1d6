// fuzz_idx.c: libFuzzer harness of the IDX reader, vkt_dataset_load_idx (engine/run/data.c): an
// image file and a label file from one input (fuzz_util.h: a flags byte chooses which of the two
// is gzip-compressed before the reader sees it), read through zlib's gzread as the reader reads
// Fashion-MNIST. Any input must give VKT_OK, VKT_ERR_FORMAT or VKT_ERR_HOST_MEMORY with a
// message, and a set it returns must be one a run accepts.
#include "fuzz_util.h"

#include "data.h"
#include "fuzz_dataset_check.h"
#include "vktrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_pair p;
    fz_pair_open(&p, data, size);
    vkt_dataset ds;
    vkt_status s = vkt_dataset_load_idx(p.path[0], p.path[1], &ds);
    if (s == VKT_OK) {
        fz_check_dataset(&ds, "vkt_dataset_load_idx");
    } else if ((s != VKT_ERR_FORMAT && s != VKT_ERR_HOST_MEMORY) || !*vkt_error() || ds.x || ds.y) {
        fprintf(stderr, "vkt_dataset_load_idx returned %s: \"%s\"%s\n", vkt_status_name(s),
                vkt_error(), ds.x || ds.y ? " and left arrays behind" : "");
        abort();
    }
    vkt_dataset_free(&ds);
    fz_pair_close(&p);
    return 0;
}
