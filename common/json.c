/*
 * common/json.c - the JSON parser, jansson, made strict and its errors
 * worded "NAME:LINE:COL: what" (see common/json.h).
 */
#include "common/json.h"
#include "common/check.h"

int json_parse_at(const char *text, size_t len, const char *name, long line, json_t **out) {
    json_error_t e;
    /* any value at the top: its callers say what they expected there, in their own words */
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
    if (*out) return CNT_OK;
    if (e.line < 0) return cnt_err_set("%s: %s", name, e.text);
    return cnt_err_set("%s:%ld:%d: %s", name, line - 1 + e.line, e.column, e.text);
}

int json_parse(const char *text, size_t len, const char *name, json_t **out) {
    return json_parse_at(text, len, name, 1, out);
}

const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "true/false";
    default: return "null";
    }
}
