/* Build probe: cuDNN links. */
#include <cudnn.h>
int main(void) { return cudnnGetVersion() == 0; }
