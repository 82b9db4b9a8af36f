/*
 * common/json.h - a small, strict JSON reader for the project's own files
 * (the step profile of `trainer --profile` and tools/profile.sh).
 *
 * Provides json_parse, which turns a whole text into a tree of values
 * (objects, arrays, numbers, strings, true, false, null), and lookups on it.
 * Strict: one value and nothing but white space after it, no trailing
 * commas, no duplicate keys in an object, numbers in JSON's own grammar that
 * fit a double, strings without raw control bytes, nesting at most 64 deep.
 * Objects keep their keys in file order.
 *
 * Errors: json_parse returns CNT_ERR with a message "NAME:LINE:COL: what was
 * expected" (NAME is the caller's name for the text, usually the file's
 * path); allocation failure is fatal. Lookups never fail: they return NULL
 * when the key is absent or the value is not an object.
 */
#ifndef CNT_JSON_H
#define CNT_JSON_H

#include <stddef.h>

typedef enum json_type {
    JSON_TYPE_NULL,
    JSON_TYPE_BOOL,
    JSON_TYPE_NUMBER,
    JSON_TYPE_STRING,
    JSON_TYPE_ARRAY,
    JSON_TYPE_OBJECT
} json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    double number;      /* JSON_TYPE_NUMBER; JSON_TYPE_BOOL: 0 or 1 */
    char *string;       /* JSON_TYPE_STRING: UTF-8, NUL-terminated */
    size_t n;           /* JSON_TYPE_ARRAY, JSON_TYPE_OBJECT: number of items */
    json_value *items;  /* [n]: the array's elements or the object's values */
    char **keys;        /* [n]: JSON_TYPE_OBJECT only, the keys of items */
};

/* Parses text[0, len) (NUL bytes inside are refused) into *out, which the
 * caller frees with json_free. On CNT_ERR *out is NULL. */
int json_parse(const char *text, size_t len, const char *name, json_value **out);
/* The value of key in obj, or NULL (absent key, or obj not an object). */
const json_value *json_get(const json_value *obj, const char *key);
/* "number", "string", ... for messages. */
const char *json_type_name(json_type t);
/* Frees the tree from json_parse. NULL is fine. */
void json_free(json_value *v);

#endif
