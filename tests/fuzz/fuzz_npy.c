// fuzz_npy.c: libFuzzer harness of the .npy reader, vkt_dataset_load_npy (engine/run/data.c):
// a features file X and a labels file Y from one input (fuzz_util.h: a flags byte chooses which
// of the two is gzip-compressed before the reader sees it): the header's dict, every dtype, the
// conversions and their refusals. Any input must give VKT_OK, VKT_ERR_FORMAT or
// VKT_ERR_HOST_MEMORY with a message, and a set it returns must be one a run accepts.
#include "fuzz_util.h"

#include "data.h"
#include "fuzz_dataset_check.h"
#include "vktrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_pair p;
    fz_pair_open(&p, data, size);
    vkt_dataset ds;
    vkt_status s = vkt_dataset_load_npy(p.path[0], p.path[1], &ds);
    if (s == VKT_OK) {
        fz_check_dataset(&ds, "vkt_dataset_load_npy");
    } else if ((s != VKT_ERR_FORMAT && s != VKT_ERR_HOST_MEMORY) || !*vkt_error() || ds.x || ds.y) {
        fprintf(stderr, "vkt_dataset_load_npy returned %s: \"%s\"%s\n", vkt_status_name(s),
                vkt_error(), ds.x || ds.y ? " and left arrays behind" : "");
        abort();
    }
    vkt_dataset_free(&ds);
    fz_pair_close(&p);
    return 0;
}
