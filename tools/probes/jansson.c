/* Build probe: jansson 2.8 or later links (from 2.8 an object keeps its
 * keys in the file's order, which the safetensors reader reports in). */
#include <jansson.h>
#if JANSSON_VERSION_HEX < 0x020800
#error "jansson older than 2.8"
#endif
int main(void) {
    json_error_t e;
    json_t *v = json_loadb("{\"a\":1}", 7, JSON_REJECT_DUPLICATES, &e);
    int ok = v && json_integer_value(json_object_get(v, "a")) == 1;
    json_decref(v);
    return !ok;
}
