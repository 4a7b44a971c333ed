/*
 * test_float.c — f16 and bf16 conversions (core/fp16.h, through the f16/bf16 rows of the
 * trait table) against known bit patterns: exact values, round-to-nearest-even ties,
 * overflow to infinity, infinities, NaNs, signed zeros and subnormals. The expected
 * patterns are IEEE 754's (and what ggml's scalar conversions give).
 */
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "tensor/types.h"
#include "testutil.h"

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Through the table's row functions, so the rows are what is tested. */
static uint16_t to_f16(float f) {
    uint16_t h;
    cera_type_get(CERA_TYPE_F16)->from_float_ref(&f, &h, 1);
    return h;
}
static uint16_t to_bf16(float f) {
    uint16_t h;
    cera_type_get(CERA_TYPE_BF16)->from_float_ref(&f, &h, 1);
    return h;
}
static float from_f16(uint16_t h) {
    float f;
    cera_type_get(CERA_TYPE_F16)->to_float(&h, &f, 1);
    return f;
}
static float from_bf16(uint16_t h) {
    float f;
    cera_type_get(CERA_TYPE_BF16)->to_float(&h, &f, 1);
    return f;
}

static void test_f32_to_f16(void) {
    static const struct {
        uint32_t f32;
        uint16_t f16;
        const char *what;
    } cases[] = {
        {0x3f800000u, 0x3c00, "1.0"},
        {0xc0000000u, 0xc000, "-2.0"},
        {0x3dcccccdu, 0x2e66, "0.1 (rounded down)"},
        {0x3eaaaaabu, 0x3555, "1/3"},
        {0x477fe000u, 0x7bff, "65504, the largest f16"},
        {0x477fefffu, 0x7bff, "just below the overflow threshold 65520"},
        {0x477ff000u, 0x7c00, "65520 rounds (tie, to even) to infinity"},
        {0x7f7fffffu, 0x7c00, "FLT_MAX overflows to infinity"},
        {0x7f800000u, 0x7c00, "+inf"},
        {0xff800000u, 0xfc00, "-inf"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x38800000u, 0x0400, "2^-14, the smallest normal f16"},
        {0x387fc000u, 0x03ff, "the largest f16 subnormal"},
        {0x33800000u, 0x0001, "2^-24, the smallest f16 subnormal"},
        {0x33000000u, 0x0000, "2^-25: a tie, to even (zero)"},
        {0x33000001u, 0x0001, "just above 2^-25 rounds up"},
        {0x33c00000u, 0x0002, "3 * 2^-25: a tie, to even (2)"},
        {0x00000001u, 0x0000, "the smallest f32 subnormal flushes to +0"},
        {0x80000001u, 0x8000, "... and to -0 when negative"},
        {0x3f801000u, 0x3c00, "1 + 2^-11: a tie, to even (1.0)"},
        {0x3f803000u, 0x3c02, "1 + 3 * 2^-11: a tie, to even (up)"},
        {0x3f801001u, 0x3c01, "just above the tie rounds up"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t h = to_f16(f32_from_bits(cases[i].f32));
        CHECK(h == cases[i].f16, "f32 0x%08x (%s) -> f16 0x%04x, want 0x%04x", cases[i].f32, cases[i].what, h,
              cases[i].f16);
    }
    /* NaNs stay NaNs (quiet, sign kept), whatever their payload. */
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const uint16_t h = to_f16(f32_from_bits(nans[i]));
        CHECK((h & 0x7fff) == 0x7e00 && (h >> 15) == (nans[i] >> 31), "NaN 0x%08x -> 0x%04x", nans[i], h);
    }
}

static void test_f16_to_f32(void) {
    static const struct {
        uint16_t f16;
        uint32_t f32;
    } cases[] = {
        {0x3c00, 0x3f800000u}, {0xc000, 0xc0000000u}, {0x7bff, 0x477fe000u}, {0x0400, 0x38800000u},
        {0x03ff, 0x387fc000u}, {0x0001, 0x33800000u}, {0x8001, 0xb3800000u}, {0x0000, 0x00000000u},
        {0x8000, 0x80000000u}, {0x7c00, 0x7f800000u}, {0xfc00, 0xff800000u}, {0x3555, 0x3eaaa000u},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint32_t u = bits_of(from_f16(cases[i].f16));
        CHECK(u == cases[i].f32, "f16 0x%04x -> f32 0x%08x, want 0x%08x", cases[i].f16, u, cases[i].f32);
    }
    CHECK(isnan(from_f16(0x7e00)) && isnan(from_f16(0x7c01)) && isnan(from_f16(0xfe00)),
          "f16 NaNs decode to NaN");

    /* Every f16 that is not a NaN survives f16 -> f32 -> f16 unchanged, and decodes to
     * the value its fields say (exhaustive: 63488 patterns). */
    int bad_trip = 0, bad_value = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        const float f = from_f16((uint16_t)h);
        if (to_f16(f) != h) bad_trip++;
        const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
        if (h & 0x8000) v = -v;
        if ((double)f != v) bad_value++;
    }
    CHECK(bad_trip == 0, "%d f16 patterns do not round-trip through f32", bad_trip);
    CHECK(bad_value == 0, "%d f16 patterns decode to the wrong value", bad_value);
}

static void test_bf16(void) {
    static const struct {
        uint32_t f32;
        uint16_t bf16;
        const char *what;
    } cases[] = {
        {0x3f800000u, 0x3f80, "1.0"},
        {0x3f808000u, 0x3f80, "a tie, to even (down)"},
        {0x3f818000u, 0x3f82, "a tie, to even (up)"},
        {0x3f808001u, 0x3f81, "just above the tie"},
        {0xbf80ffffu, 0xbf81, "negative, rounds away"},
        {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to infinity"},
        {0x7f800000u, 0x7f80, "+inf"},
        {0xff800000u, 0xff80, "-inf"},
        {0x80000000u, 0x8000, "-0"},
        {0x00000001u, 0x0000, "the smallest subnormal rounds to 0"},
        {0x00018000u, 0x0002, "a subnormal tie, to even"},
        {0x00400000u, 0x0040, "a subnormal kept exactly"},
        {0x7fc00000u, 0x7fc0, "quiet NaN"},
        {0x7f800001u, 0x7fc0, "signalling NaN made quiet (not rounded to inf)"},
        {0xffffffffu, 0xffff, "NaN with every payload bit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t h = to_bf16(f32_from_bits(cases[i].f32));
        CHECK(h == cases[i].bf16, "f32 0x%08x (%s) -> bf16 0x%04x, want 0x%04x", cases[i].f32, cases[i].what,
              h, cases[i].bf16);
    }
    /* bf16 -> f32 is exact: the bf16 bits are the top half of the f32. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        const uint32_t u = bits_of(from_bf16((uint16_t)h));
        if (u != h << 16) bad++;
    }
    CHECK(bad == 0, "%d bf16 patterns do not decode to their top-half f32", bad);
}

/* Whole rows: odd lengths and unaligned buffers (rows in a file need not be aligned). */
static void test_rows(void) {
    float x[37], y[37];
    uint8_t buf[2 * 37 + 1];
    for (int i = 0; i < 37; i++) x[i] = (float)(i - 18) * 0.37f;
    for (int t = 0; t < 2; t++) {
        const cera_type_traits *tt = cera_type_get(t ? CERA_TYPE_BF16 : CERA_TYPE_F16);
        tt->from_float_ref(x, buf + 1, 37);
        tt->to_float(buf + 1, y, 37);
        int bad = 0;
        for (int i = 0; i < 37; i++) {
            const float want =
                t ? cera_bf16_to_f32(cera_f32_to_bf16(x[i])) : cera_f16_to_f32(cera_f32_to_f16(x[i]));
            if (bits_of(y[i]) != bits_of(want)) bad++;
        }
        CHECK(bad == 0, "%s rows: %d elements differ from the scalar conversion", tt->name, bad);
    }
    float copy[37];
    cera_type_get(CERA_TYPE_F32)->from_float_ref(x, copy, 37);
    cera_type_get(CERA_TYPE_F32)->to_float(copy, y, 37);
    CHECK(!memcmp(x, y, sizeof x), "f32 rows copy the bits");
}

int main(void) {
    test_f32_to_f16();
    test_f16_to_f32();
    test_bf16();
    test_rows();
    return test_finish();
}
