// results.h: the CLI's one reader of `vktrain bench suite` result files (the result format,
// version 1: docs/COMPARING.md), which `vktrain compare` and `vktrain advise` both read, and the
// small JSON-file helpers it is built on, which advise's reader of device profiles shares: a file
// read whole and parsed, its "format" and "version" checked, and typed getters, every refusal
// naming the file and the JSON path, what was found and what was expected (results.c).
// Not part of libvktrain; not here: what a command does with a result.
#ifndef VKT_CLI_RESULTS_H
#define VKT_CLI_RESULTS_H

#include <stdbool.h>
#include <stddef.h>

#include "vktrain.h"

struct cJSON;

// ---------------------------------------------------------------------------------------------
// JSON files

// A kind of JSON file: the "format" and "version" it must have, and the words its refusals use.
typedef struct jf_spec {
    const char *what;      // the file: "cannot open WHAT PATH: why HINT", "too large for a WHAT"
    const char *hint;      // where such a file comes from
    const char *invalid;   // text that is not JSON: "PATH: INVALID at byte N (line L, column C)"
    const char *format;    // the "format" it must have,
    int version;           // and the "version"
    const char *name;      // "PATH: not a NAME (its \"format\" is ...)"
    const char *versioned; // "PATH: VERSIONED format version N, but this vktrain reads version M"
    const char *redo;      // what to do about a file refused whole (not JSON, another format)
    const char *newer;     // NULL, or what else to do with a file of a newer version
    const char *missing;   // NULL, or what to do about a missing field (see jf_bad)
} jf_spec;

// One file being read: what refusals name.
typedef struct jf_doc {
    const char *path;
    const jf_spec *spec;
} jf_doc;

// Reads the regular file d->path (at most 64 MiB, no NUL byte), parses it and checks that it is
// an object of d->spec's "format" and "version" (an integer). *root: the JSON (the caller
// deletes it), NULL after a failure: VKT_ERR_IO when the file cannot be opened or read,
// VKT_ERR_FORMAT for the rest (invalid JSON with its byte, line and column, and whether the
// text ends early), VKT_ERR_HOST_MEMORY.
vkt_status jf_load(const jf_doc *d, struct cJSON **root);
// What v is, for messages: "missing" (NULL), "null", "a number", "an array", ...
const char *jf_found(const struct cJSON *v);
// o's member key (NULL: none, or o is not an object).
const struct cJSON *jf_field(const struct cJSON *o, const char *key);
// The refusal of the value v at the JSON path (VKT_ERR_FORMAT): "PATH: JSON-PATH is FOUND,
// expected EXPECTED"; a missing value with d->spec->missing set: "PATH: JSON-PATH is missing
// (expected EXPECTED); MISSING".
vkt_status jf_bad(const jf_doc *d, const char *path, const struct cJSON *v, const char *expected);

// The getters read o.key, named prefix.key in refusals ("" at the top level). Each refuses a
// value of another type or range with jf_bad, or with the value found.
enum { JF_OPTIONAL = 1, JF_NULLABLE = 2, JF_POSITIVE = 4 };
// A finite number >= 0 (> 0 with JF_POSITIVE); absent (with JF_OPTIONAL) or null (with
// JF_NULLABLE): *out = -1.
vkt_status jf_num(const jf_doc *d, const struct cJSON *o, const char *prefix, const char *key,
                  int flags, double *out);
// An integer from lo to hi.
vkt_status jf_int(const jf_doc *d, const struct cJSON *o, const char *prefix, const char *key,
                  int lo, int hi, int *out);
// A string, cut to size; required: present and non-empty (else absent gives "").
vkt_status jf_str(const jf_doc *d, const struct cJSON *o, const char *prefix, const char *key,
                  bool required, char *out, size_t size);
// true or false; not required: absent gives false.
vkt_status jf_bool(const jf_doc *d, const struct cJSON *o, const char *prefix, const char *key,
                   bool required, bool *out);

// ---------------------------------------------------------------------------------------------
// bench suite results

typedef struct results_train {
    char model[64];
    int batch;
    bool fits;
    double planned_bytes;
    double parameters, flops_per_sample; // < 0: not given
    double sps;                          // fits only
    double peak_memory;                  // < 0: not measured
    double tokens_per_s;                 // < 0: not given (a model that is not a language model)
} results_train;

typedef struct results_matmul {
    int size;
    char form[8];
    double gflops, fraction;
} results_matmul;

typedef struct results_sat {
    char model[64];
    int batch;
    double sps;
} results_sat;

typedef struct results_file {
    const char *path;
    char label[128]; // the device's short name
    char name[256], driver[256], type[32], created[64];
    double memory_bytes, mem_limit; // mem_limit < 0: none
    bool quick;
    double fma, bw; // peak FMA GFLOP/s, bandwidth GB/s
    results_matmul *mm;
    int nmm;
    results_train *tr; // distinct (model, batch)
    int ntr;
    results_sat *sat;
    int nsat;
} results_file;

// The words of compare's and of advise's refusals of a result file (spec->what, invalid and
// versioned differ): each command keeps the ones its users and tests know.
extern const jf_spec results_for_compare, results_for_advise;

// Reads and checks the result file at path into *r (zeroed first; r->path = path, kept), its
// refusals worded by spec (results_for_compare or results_for_advise). Refuses, with
// VKT_ERR_FORMAT and a message naming the file and the JSON path, another "format", another
// "version" (naming the one found and the one read here), invalid JSON, any field that is missing
// or of the wrong type or range, and a (model, batch) or (size, form) measured twice; VKT_ERR_IO
// when the file cannot be read. Fields no command reads (host, split, command, ...) are not
// checked. Free with results_free, also after a failure.
vkt_status results_load(const char *path, const jf_spec *spec, results_file *r);
void results_free(results_file *r);

#endif
