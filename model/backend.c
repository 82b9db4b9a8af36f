/*
 * model/backend.c - what every backend shares besides its table: the
 * weights epochs of backend_ctx.
 */
#include "model/backend.h"

#include <stdatomic.h>

uint64_t backend_epoch_new(void) {
    /* from any thread: one atomic counter for the process, so no two spans
     * (of any two nets) share a number, and 0 is never handed out */
    static atomic_uint_fast64_t last;
    return (uint64_t)atomic_fetch_add(&last, 1) + 1;
}
