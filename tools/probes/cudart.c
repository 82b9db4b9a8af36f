/* Build probe: the CUDA runtime headers and library link (no GPU needed). */
#include <cuda_runtime.h>
int main(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaErrorInvalidValue;
}
