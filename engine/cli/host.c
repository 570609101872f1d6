// host.c: the machine a benchmark ran on, for its text and its JSON. A CPU driver's figures, and
// their ratio to a CPU baseline, depend on the CPU model, not only on its vector width: the same
// build ran fashion_mlp's step at 0.43-0.52x PyTorch's on a 2-vCPU Zen 2 and at 0.33x on a 2-vCPU
// Zen 3 (docs/PERFORMANCE.md, fourteenth pass). A virtual machine may name its CPU only "AMD
// EPYC", so the x86 family and model are kept too, with the microarchitecture they name where it
// is one of AMD's Zen generations (AMD's family/model ranges; other CPUs: "").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "vkt_internal.h"

void cli_proc_field(const char *path, const char *key, char *out, size_t size) {
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    char line[4096];
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, n) != 0) continue;
        const char *v = line + n;
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v != ':') continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(out, size, "%s", v);
        out[strcspn(out, "\r\n")] = '\0';
        break;
    }
    if (f) fclose(f);
}

// /proc/cpuinfo's integer field key, or -1.
static int cpuinfo_int(const char *key) {
    char buf[64];
    cli_proc_field("/proc/cpuinfo", key, buf, sizeof buf);
    char *end;
    long v = strtol(buf, &end, 10);
    return end == buf || v < 0 ? -1 : (int)v;
}

// Whether the space-separated flags hold flag.
static bool has_flag(const char *flags, const char *flag) {
    size_t n = strlen(flag);
    for (const char *p = flags; (p = strstr(p, flag)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

// AMD's Zen generations by family and model (families 17h, 19h, 1Ah).
static const char *amd_uarch(int family, int model) {
    if (family == 0x17) return model >= 0x30 ? "Zen 2" : "Zen or Zen+";
    if (family == 0x19) {
        bool zen4 = (model >= 0x10 && model <= 0x1f) || (model >= 0x60 && model <= 0x7f) ||
                    (model >= 0xa0 && model <= 0xaf);
        return zen4 ? "Zen 4" : "Zen 3";
    }
    if (family == 0x1a) return "Zen 5";
    return "";
}

void cli_host_get(cli_host *h) {
    memset(h, 0, sizeof *h);
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(h->os, sizeof h->os, "%s %s %s", u.sysname, u.release, u.machine);
    else
        snprintf(h->os, sizeof h->os, "unknown");
    cli_proc_field("/proc/cpuinfo", "model name", h->cpu, sizeof h->cpu);
    if (!h->cpu[0]) snprintf(h->cpu, sizeof h->cpu, "unknown");
    cli_proc_field("/proc/cpuinfo", "vendor_id", h->vendor, sizeof h->vendor);
    h->family = cpuinfo_int("cpu family");
    h->model = cpuinfo_int("model");
    h->stepping = cpuinfo_int("stepping");
    snprintf(h->uarch, sizeof h->uarch, "%s",
             strcmp(h->vendor, "AuthenticAMD") == 0 ? amd_uarch(h->family, h->model) : "");
    char *flags = malloc(8192);
    if (flags) {
        cli_proc_field("/proc/cpuinfo", "flags", flags, 8192);
        const char *isa = has_flag(flags, "avx512f") ? "AVX-512"
                          : has_flag(flags, "avx2")  ? "AVX2"
                          : has_flag(flags, "avx")   ? "AVX"
                          : flags[0]                 ? "SSE"
                                                     : "";
        snprintf(h->isa, sizeof h->isa, "%s", isa);
        h->fma = has_flag(flags, "fma");
        free(flags);
    }
    char buf[64];
    cli_proc_field("/proc/cpuinfo", "cpu MHz", buf, sizeof buf);
    h->mhz = strtod(buf, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    h->cpus = cpus > 0 ? (int)cpus : 0;
    h->l2_bytes = (long)vkt_host_cache_bytes(2);
    h->l3_bytes = (long)vkt_host_cache_bytes(3);
    cli_proc_field("/proc/meminfo", "MemTotal", buf, sizeof buf); // "24576000 kB"
    h->memory_bytes = strtod(buf, NULL) * 1024;
    if (gethostname(h->hostname, sizeof h->hostname) != 0)
        snprintf(h->hostname, sizeof h->hostname, "unknown");
    h->hostname[sizeof h->hostname - 1] = '\0';
}

const char *cli_host_text(const cli_host *h, char *buf, size_t size) {
    char fam[96] = "", l2[48] = "", l3[32] = "", mhz[32] = "";
    if (h->family >= 0 && h->model >= 0)
        snprintf(fam, sizeof fam, " (%s%sx86 family %d model %d)", h->uarch,
                 h->uarch[0] ? ", " : "", h->family, h->model);
    if (h->l2_bytes) snprintf(l2, sizeof l2, ", L2 %ld KiB a core", h->l2_bytes / 1024);
    if (h->l3_bytes && h->l3_bytes % (1 << 20) == 0)
        snprintf(l3, sizeof l3, ", L3 %ld MiB", h->l3_bytes >> 20);
    else if (h->l3_bytes)
        snprintf(l3, sizeof l3, ", L3 %ld KiB", h->l3_bytes / 1024);
    if (h->mhz > 0) snprintf(mhz, sizeof mhz, ", %.0f MHz", h->mhz);
    snprintf(buf, size, "%s%s, %d logical CPUs, %s%s%s%s%s", h->cpu, fam, h->cpus,
             h->isa[0] ? h->isa : "vector ISA unknown", h->isa[0] && h->fma ? " + FMA" : "", l2, l3,
             mhz);
    return buf;
}

cJSON *cli_host_json(const cli_host *h) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "os", h->os);
    cJSON_AddStringToObject(o, "cpu", h->cpu);
    cJSON_AddStringToObject(o, "cpu_vendor", h->vendor);
    if (h->family >= 0) cJSON_AddNumberToObject(o, "cpu_family", h->family);
    if (h->model >= 0) cJSON_AddNumberToObject(o, "cpu_model", h->model);
    if (h->stepping >= 0) cJSON_AddNumberToObject(o, "cpu_stepping", h->stepping);
    cJSON_AddStringToObject(o, "cpu_uarch", h->uarch);
    cJSON_AddStringToObject(o, "isa", h->isa);
    cJSON_AddBoolToObject(o, "fma", h->fma);
    if (h->mhz > 0) cJSON_AddNumberToObject(o, "cpu_mhz", h->mhz);
    cJSON_AddNumberToObject(o, "cores", h->cpus);
    if (h->l2_bytes) cJSON_AddNumberToObject(o, "l2_bytes", (double)h->l2_bytes);
    if (h->l3_bytes) cJSON_AddNumberToObject(o, "l3_bytes", (double)h->l3_bytes);
    cJSON_AddNumberToObject(o, "memory_bytes", h->memory_bytes);
    cJSON_AddStringToObject(o, "hostname", h->hostname);
    return o;
}
