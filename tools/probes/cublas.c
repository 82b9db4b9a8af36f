/* Build probe: cuBLAS links. */
#include <cublas_v2.h>
int main(void) {
    cublasHandle_t h;
    return cublasCreate(&h) == CUBLAS_STATUS_INVALID_VALUE;
}
