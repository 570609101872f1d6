// host_cache.c: the host CPU's cache sizes, for the matmul's grid order on CPU drivers
// (engine/ops/matmul.c, n_fast) and for the benchmarks' host line (engine/cli/host.c), so that
// both say the same. Linux's sysfs (cpu0's cache/index*/level, type, size) first, glibc's sysconf
// after it: on the team's Zen 4 guest glibc put the L3 at 320 MiB, sysfs (and lscpu) at 32 MiB.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vkt_internal.h"

// The first line of sysfs file index<i>/<name> of cpu0's caches into text; false when absent.
static bool cache_field(int i, const char *name, char *text, size_t size) {
    char path[80];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, name);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(text, (int)size, f) != NULL;
    fclose(f);
    return ok;
}

uint64_t vkt_host_cache_bytes(int level) {
    char text[32];
    for (int i = 0; i < 16 && cache_field(i, "level", text, sizeof text); i++) {
        if (atoi(text) != level) continue;
        if (cache_field(i, "type", text, sizeof text) && strncmp(text, "Instruction", 11) == 0)
            continue;
        if (!cache_field(i, "size", text, sizeof text)) continue;
        char *end = NULL;
        uint64_t n = strtoull(text, &end, 10); // "1024K", "32768K", "2M"
        if (end && (*end == 'K' || *end == 'k')) n <<= 10;
        if (end && *end == 'M') n <<= 20;
        if (n) return n;
    }
    long n = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
    if (level == 2) n = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (level == 3) n = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return n > 0 ? (uint64_t)n : 0;
}
