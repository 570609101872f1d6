// json_depth.h: telling cJSON's nesting limit from a syntax error. cJSON refuses arrays and
// objects nested deeper than CJSON_NESTING_LIMIT (1000) levels, to bound its recursion, but
// reports it as any other parse failure: a NULL root and an error position at the '[' or '{'
// that would open level 1001. The readers of JSON files (the model parser, the trace reader,
// the checkpoint header) ask this module, when a parse fails, whether that is what happened, so
// that the message says "nested deeper than 1000 levels" rather than "missing comma".
#ifndef VKT_JSON_DEPTH_H
#define VKT_JSON_DEPTH_H

#include <stdbool.h>
#include <stddef.h>

// The nesting limit the readers' cJSON was built with (CJSON_NESTING_LIMIT).
int vkt_json_nesting_limit(void);

// Whether a cJSON parse of text[0..len) that failed at byte `at` (the position cJSON reported)
// failed because an array or object there would be nested deeper than the limit: the byte at
// `at` opens one, and the arrays and objects open before it (strings skipped) are at least the
// limit. Reads text[0..at] only.
bool vkt_json_too_deep(const char *text, size_t len, size_t at);

#endif
