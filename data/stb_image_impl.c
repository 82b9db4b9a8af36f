/*
 * data/stb_image_impl.c - stb_image's and stb_image_write's implementations,
 * compiled from their headers where no library holds them (Debian's libstb
 * does: then this file is empty), with stb's default (short) failure
 * reasons, as Debian builds them. stb_image_write writes the images of
 * tools/to_imagefolder and the tests. The Makefile sets CNT_STB_IMPL
 * (docs/install.md, STB_ROOT).
 */
#if CNT_STB_IMPL
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#else
typedef int cnt_stb_image_in_a_library; /* ISO C wants a declaration in every file */
#endif
