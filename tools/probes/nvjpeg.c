/* Probe: nvJPEG (headers and library), for data.decoder = nvjpeg. */
#include <nvjpeg.h>

int main(void) {
    int major = 0;
    return nvjpegGetProperty(MAJOR_VERSION, &major) == NVJPEG_STATUS_SUCCESS ? 0 : 1;
}
