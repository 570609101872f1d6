// json_depth.c: whether a failed cJSON parse hit cJSON's nesting limit (json_depth.h). Not here:
// parsing (cJSON does it) or the messages (each reader words its own).
#include "json_depth.h"

#include <cjson/cJSON.h>

int vkt_json_nesting_limit(void) { return CJSON_NESTING_LIMIT; }

bool vkt_json_too_deep(const char *text, size_t len, size_t at) {
    if (!text || at >= len || (text[at] != '[' && text[at] != '{')) return false;
    // cJSON parsed text[0..at) without error, so it is a prefix of valid JSON: brackets outside
    // strings are structure, and a string's quote is the first '"' not escaped by a backslash.
    size_t depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < at; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return !in_string && depth >= (size_t)CJSON_NESTING_LIMIT;
}
