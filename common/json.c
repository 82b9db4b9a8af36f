/*
 * common/json.c - a recursive-descent JSON parser (see common/json.h).
 */
#include "common/json.h"
#include "common/check.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct parser {
    const char *p, *end, *start;
    const char *name;
} parser;

/* Sets the error at the parser's position: "name:line:col: what". */
static int perr(const parser *ps, const char *what) {
    int line = 1, col = 1;
    for (const char *q = ps->start; q < ps->p; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    if (ps->p >= ps->end) return cnt_err_set("%s:%d:%d: %s (at the end of the text)", ps->name, line, col, what);
    return cnt_err_set("%s:%d:%d: %s (found '%c')", ps->name, line, col, what,
                       (unsigned char)*ps->p >= 0x20 && (unsigned char)*ps->p < 0x7f ? *ps->p : '?');
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int parse_value(parser *ps, json_value *v, int depth);

static int hex4(parser *ps, unsigned *cp) {
    *cp = 0;
    for (int i = 0; i < 4; i++, ps->p++) {
        if (ps->p >= ps->end) return perr(ps, "expected 4 hex digits after \\u");
        char c = *ps->p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return perr(ps, "expected 4 hex digits after \\u");
        *cp = *cp * 16 + (unsigned)d;
    }
    return CNT_OK;
}

/* Appends code point cp as UTF-8 to out (room for 4 bytes is the caller's). */
static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string starting at the opening quote; *out is malloc'ed. Escapes never
 * make the text longer, so the raw length bounds the decoded one. */
static int parse_string(parser *ps, char **out) {
    ps->p++; /* the opening quote */
    const char *q = ps->p;
    while (q < ps->end && *q != '"') q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
    char *s = cnt_malloc((size_t)(q - ps->p) + 4);
    size_t n = 0;
    for (;;) {
        if (ps->p >= ps->end) {
            free(s);
            return perr(ps, "unterminated string");
        }
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') break;
        if (c < 0x20) {
            free(s);
            return perr(ps, "control byte inside a string");
        }
        if (c != '\\') {
            s[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        char e = ps->p < ps->end ? *ps->p : '\0';
        const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
        const char *m = e ? strchr(map, e) : NULL;
        if (m && (m - map) % 2 == 0) {
            s[n++] = m[1];
            ps->p++;
        } else if (e == 'u') {
            ps->p++;
            unsigned cp;
            if (hex4(ps, &cp) != CNT_OK) {
                free(s);
                return CNT_ERR;
            }
            if (cp >= 0xd800 && cp < 0xdc00) {
                unsigned lo;
                if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    free(s);
                    return perr(ps, "expected the low half of a surrogate pair");
                }
                ps->p += 2;
                if (hex4(ps, &lo) != CNT_OK || lo < 0xdc00 || lo >= 0xe000) {
                    free(s);
                    return perr(ps, "expected the low half of a surrogate pair");
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                free(s);
                return perr(ps, "lone low surrogate in \\u escape");
            }
            if (cp == 0) {
                free(s);
                return perr(ps, "\\u0000 inside a string");
            }
            n += put_utf8(s + n, cp);
        } else {
            free(s);
            return perr(ps, "unknown escape in a string");
        }
    }
    ps->p++; /* the closing quote */
    s[n] = '\0';
    *out = s;
    return CNT_OK;
}

/* A number in JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(parser *ps, double *out) {
    const char *q = ps->p;
    if (q < ps->end && *q == '-') q++;
    if (q < ps->end && *q == '0') {
        q++;
    } else if (q < ps->end && *q >= '1' && *q <= '9') {
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    } else {
        return perr(ps, "expected a value");
    }
    if (q < ps->end && *q == '.') {
        q++;
        if (q >= ps->end || *q < '0' || *q > '9') return perr(ps, "expected digits after the decimal point");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || *q < '0' || *q > '9') return perr(ps, "expected digits in the exponent");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[128];
    if ((size_t)(q - ps->p) >= sizeof buf) return perr(ps, "number too long");
    memcpy(buf, ps->p, (size_t)(q - ps->p));
    buf[q - ps->p] = '\0';
    errno = 0;
    double d = strtod(buf, NULL);
    if (errno == ERANGE && isinf(d)) return perr(ps, "number out of the range of a double");
    *out = d;
    ps->p = q;
    return CNT_OK;
}

static int literal(parser *ps, const char *word) {
    size_t k = strlen(word);
    if ((size_t)(ps->end - ps->p) < k || memcmp(ps->p, word, k) != 0) return perr(ps, "expected a value");
    ps->p += k;
    return CNT_OK;
}

/* Appends an empty value to v's items (and a key slot for an object). */
static json_value *push(json_value *v, size_t *cap) {
    if (v->n == *cap) {
        *cap = *cap ? 2 * *cap : 4;
        v->items = cnt_realloc(v->items, *cap * sizeof *v->items);
        if (v->type == JSON_TYPE_OBJECT) v->keys = cnt_realloc(v->keys, *cap * sizeof *v->keys);
    }
    json_value *it = &v->items[v->n];
    memset(it, 0, sizeof *it);
    if (v->type == JSON_TYPE_OBJECT) v->keys[v->n] = NULL;
    v->n++;
    return it;
}

static int parse_container(parser *ps, json_value *v, int depth) {
    int object = *ps->p == '{';
    char close = object ? '}' : ']';
    v->type = object ? JSON_TYPE_OBJECT : JSON_TYPE_ARRAY;
    if (depth >= JSON_MAX_DEPTH) return perr(ps, "nested deeper than 64 levels");
    ps->p++;
    size_t cap = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return CNT_OK;
    }
    for (;;) {
        skip_ws(ps);
        char *key = NULL;
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"') return perr(ps, "expected a key (a string)");
            const char *at = ps->p;
            if (parse_string(ps, &key) != CNT_OK) return CNT_ERR;
            if (json_get(v, key)) {
                ps->p = at;
                free(key);
                return perr(ps, "duplicate key");
            }
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                return perr(ps, "expected ':' after the key");
            }
            ps->p++;
        }
        json_value *it = push(v, &cap);
        if (object) v->keys[v->n - 1] = key;
        if (parse_value(ps, it, depth + 1) != CNT_OK) return CNT_ERR;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == close) return perr(ps, "trailing comma");
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return CNT_OK;
        }
        return perr(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(parser *ps, json_value *v, int depth) {
    skip_ws(ps);
    if (ps->p >= ps->end) return perr(ps, "expected a value");
    switch (*ps->p) {
    case '{':
    case '[':
        return parse_container(ps, v, depth);
    case '"':
        v->type = JSON_TYPE_STRING;
        return parse_string(ps, &v->string);
    case 't':
        v->type = JSON_TYPE_BOOL;
        v->number = 1;
        return literal(ps, "true");
    case 'f':
        v->type = JSON_TYPE_BOOL;
        return literal(ps, "false");
    case 'n':
        v->type = JSON_TYPE_NULL;
        return literal(ps, "null");
    default:
        v->type = JSON_TYPE_NUMBER;
        return parse_number(ps, &v->number);
    }
}

static void free_items(json_value *v) {
    free(v->string);
    for (size_t i = 0; i < v->n; i++) {
        free_items(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

int json_parse(const char *text, size_t len, const char *name, json_value **out) {
    *out = NULL;
    parser ps = {.p = text, .end = text + len, .start = text, .name = name};
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        ps.p = nul;
        return perr(&ps, "NUL byte in the text");
    }
    json_value *v = cnt_calloc(1, sizeof *v);
    int rc = parse_value(&ps, v, 0);
    if (rc == CNT_OK) {
        skip_ws(&ps);
        if (ps.p < ps.end) rc = perr(&ps, "trailing characters after the value");
    }
    if (rc != CNT_OK) {
        json_free(v);
        return CNT_ERR;
    }
    *out = v;
    return CNT_OK;
}

const json_value *json_get(const json_value *obj, const char *key) {
    if (!obj || obj->type != JSON_TYPE_OBJECT) return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (obj->keys[i] && strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

const char *json_type_name(json_type t) {
    static const char *names[] = {"null", "true/false", "number", "string", "array", "object"};
    return t >= JSON_TYPE_NULL && t <= JSON_TYPE_OBJECT ? names[t] : "?";
}

void json_free(json_value *v) {
    if (!v) return;
    free_items(v);
    free(v);
}
