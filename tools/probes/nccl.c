/* Build probe: NCCL links. */
#include <nccl.h>
int main(void) {
    int v = 0;
    return ncclGetVersion(&v) != ncclSuccess;
}
