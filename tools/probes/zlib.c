/* Build probe: zlib links. */
#include <zlib.h>
int main(void) { return crc32(0L, (const Bytef *)"a", 1) == 0; }
