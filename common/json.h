/*
 * common/json.h - reading JSON: the one parser of the trainer and its
 * tools, jansson (Debian's libjansson), behind json_parse, which makes it strict
 * and words its errors our way. Read with it: step profiles (train/profile.c),
 * safetensors headers (train/safetensors.c), metrics.jsonl records on a
 * resume (train/metrics.c). Why jansson, and not our own or cJSON:
 * docs/ARCHITECTURE.md, "Reading JSON".
 *
 * json_parse takes a whole text and gives jansson's tree (json_t: use
 * jansson's own lookups, json_object_get, json_array_get, json_integer_value,
 * ...; release it with json_decref). Strict: exactly one value (of any type)
 * and nothing but white space after it, JSON's own grammar (no trailing
 * commas, comments, single quotes or leading zeros), no duplicate key in any
 * object, valid UTF-8 only, \u escapes decoded (surrogate pairs joined; a
 * lone surrogate or \u0000 refused), no raw control byte in a string,
 * integers exact in 64 bits (json_integer_value; above 2^63 - 1 refused,
 * never rounded through a double), nesting at most 2048 deep (jansson's
 * JSON_PARSER_MAX_DEPTH: its recursion stays off the end of the stack).
 * Objects keep their keys in the text's order. How much text to trust is
 * the caller's: each reader bounds what it reads before it parses.
 *
 * Errors: json_parse returns CNT_ERR with a message "NAME:LINE:COL: what"
 * (NAME: the caller's name for the text, usually the file's path; LINE and
 * COL where jansson stopped, the last character it read, counted from 1, COL
 * in characters, 0 before the first of a line; what: jansson's own text,
 * e.g. "duplicate object key near '"a"'"), and *out NULL. Running
 * out of memory while parsing is reported the same way.
 */
#ifndef CNT_JSON_H
#define CNT_JSON_H

#include <stddef.h>

#include <jansson.h>

/* Parses text[0, len) into *out (json_decref it). */
int json_parse(const char *text, size_t len, const char *name, json_t **out);
/* The same for a text that starts on line `line` of the file NAME (a record
 * of a JSON-lines file): LINE in messages counts from there. */
int json_parse_at(const char *text, size_t len, const char *name, long line, json_t **out);
/* "a number", "a string", "an array", "an object", "true/false" or "null":
 * what v is, for messages ("expected ..., found %s"). */
const char *json_kind(const json_t *v);

#endif
