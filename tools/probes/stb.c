/* Build probe: stb_image's and stb_image_write's headers, and with
 * CNT_STB_IMPL=0 a library that holds their implementations (Debian's
 * libstb); with CNT_STB_IMPL=1 the implementations compiled from the headers
 * (data/stb_image_impl.c's way). */
#if CNT_STB_IMPL
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_WRITE_IMPLEMENTATION
#endif
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
int main(void) {
    int w, h, c;
    static const unsigned char junk[4] = {1, 2, 3, 4};
    int (*write)(const char *, int, int, int, const void *, int) = stbi_write_png;
    return stbi_load_from_memory(junk, 4, &w, &h, &c, 0) != 0 || !write;
}
