/* Build probe: oneDNN's C API (2.x, Debian's libdnnl-dev) links, and it
 * is the 2.x API the CPU backend is written for (operation descriptors). */
#include <dnnl.h>
#if DNNL_VERSION_MAJOR != 2
#error "model/backend_onednn.c is written for oneDNN 2.x"
#endif
int main(void) {
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 1;
    return dnnl_engine_destroy(eng) != dnnl_success;
}
