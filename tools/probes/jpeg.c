/* Build probe: libjpeg-turbo 1.5 or later links (partial decoding:
 * jpeg_crop_scanline and jpeg_skip_scanlines; data/jpeg.c). */
#include <stddef.h>
#include <stdio.h>

#include <jpeglib.h>
#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 1005000
#error "not libjpeg-turbo 1.5 or later"
#endif
int main(void) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&ci);
    void (*crop)(j_decompress_ptr, JDIMENSION *, JDIMENSION *) = jpeg_crop_scanline;
    JDIMENSION (*skip)(j_decompress_ptr, JDIMENSION) = jpeg_skip_scanlines;
    int ok = crop != NULL && skip != NULL;
    jpeg_destroy_decompress(&ci);
    return !ok;
}
