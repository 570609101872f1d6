// strset.c: a set of borrowed strings (open addressing, FNV-1a), for the parsers' duplicate-key
// checks: a model file's keys and a checkpoint's tensor names and metadata keys are checked in
// time linear in their number (a pairwise comparison took 22 s for 100,000 keys, 72 s for a
// checkpoint header of 100,000 tensors).
#include <stdlib.h>
#include <string.h>

#include "vkt_internal.h"

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

bool vkt_strset_init(vkt_strset *set, size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected && cap < ((size_t)1 << 40))
        cap *= 2;
    set->slots = calloc(cap, sizeof *set->slots);
    set->cap = set->slots ? cap : 0;
    set->n = 0;
    return set->slots != NULL;
}

int vkt_strset_add(vkt_strset *set, const char *s) {
    if (2 * (set->n + 1) > set->cap) { // keep the table at most half full
        vkt_strset bigger;
        if (!vkt_strset_init(&bigger, set->n + 1)) return -1;
        for (size_t i = 0; i < set->cap; i++)
            if (set->slots[i]) vkt_strset_add(&bigger, set->slots[i]);
        free(set->slots);
        *set = bigger;
    }
    size_t mask = set->cap - 1;
    for (size_t i = (size_t)fnv1a(s) & mask;; i = (i + 1) & mask) {
        if (!set->slots[i]) {
            set->slots[i] = s;
            set->n++;
            return 1;
        }
        if (strcmp(set->slots[i], s) == 0) return 0;
    }
}

void vkt_strset_free(vkt_strset *set) {
    free(set->slots);
    memset(set, 0, sizeof *set);
}
