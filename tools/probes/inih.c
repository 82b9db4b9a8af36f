/* Build probe: inih (the config file reader, train/config.c) links. */
#include <ini.h>
#include <stddef.h>
static int on(void *u, const char *s, const char *k, const char *v) { return (void)u, (void)s, (void)k, (void)v, 1; }
int main(void) { return ini_parse_string("[a]\nb = 1\n", on, NULL) != 0; }
