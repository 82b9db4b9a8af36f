/*
 * tests/test_hash.c - common/hash.h: hash_bytes keeps the FNV-1a values
 * that checkpoints and run records store; hash_large sees a flipped bit in
 * any lane and in the tail, words moved between lanes, the length, and
 * gives the same value for the same bytes at any address.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

/* The project's offset basis is FNV's 14695981039346656037 with its last
 * digit missing, since the first checkpoint; stored hashes rest on it. */
static void test_fnv_values_fixed(void **state) {
    (void)state;
    assert_true(hash_bytes("", 0) == 0x14650fb0739d0383ULL);
    assert_true(hash_bytes("a", 1) == 0x44bd8ad473cd9906ULL);
    assert_true(hash_bytes("foobar", 6) == 0x88fad7c0a8ff07f2ULL);
}

static void test_large_sees_every_byte(void **state) {
    (void)state;
    enum { N = 4 * 32 + 7 }; /* four rounds of the lanes and a tail of 7 */
    unsigned char a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = (unsigned char)(i * 37 + 11);
    uint64_t h = hash_large(a, N);
    for (int i = 0; i < N; i++)
        for (int bit = 0; bit < 8; bit += 7) {
            memcpy(b, a, N);
            b[i] ^= (unsigned char)(1u << bit);
            if (hash_large(b, N) == h) fail_msg("bit %d of byte %d not seen", bit, i);
        }
    /* the same two words in other lanes */
    memcpy(b, a, N);
    memcpy(b, a + 8, 8);
    memcpy(b + 8, a, 8);
    assert_true(hash_large(b, N) != h);
    /* the length: a prefix, and a zero byte more */
    assert_true(hash_large(a, N - 1) != h);
    assert_true(hash_large(a, 32) != hash_large(a, 33));
    unsigned char z[64] = {0};
    assert_true(hash_large(z, 32) != hash_large(z, 64));
    assert_true(hash_large(z, 40) != hash_large(z, 41));
}

static void test_large_any_address(void **state) {
    (void)state;
    enum { N = 1000 };
    unsigned char *buf = malloc(N + 8);
    assert_non_null(buf);
    for (int i = 0; i < N; i++) buf[i] = (unsigned char)(i * 13 + 5);
    uint64_t h = hash_large(buf, N);
    for (int off = 1; off < 8; off++) {
        memmove(buf + off, buf + off - 1, N);
        assert_true(hash_large(buf + off, N) == h);
    }
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv_values_fixed),
        cmocka_unit_test(test_large_sees_every_byte),
        cmocka_unit_test(test_large_any_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
