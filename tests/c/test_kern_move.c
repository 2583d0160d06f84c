/* test_kern_move.c - the per-row element moves of pointwise loops (codegen/kern_move.c): a
 * value spread over a row and a bool mask widened to 1/0, alone and inside
 * cai_kern_pointwise where an operand is broadcast along its rows or is a bool mask.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "codegen/kern_internal.h"

#define GUARD 0xA5

/* Every length around the vector widths: n copies, and the guard bytes after them untouched. */
static void check_splat(int64_t esz, const void *value) {
    static const int64_t lens[] = {0, 1, 3, 15, 16, 17, 63, 64, 65, 256, 257};
    char buf[300 * 8 + 64];
    for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
        int64_t n = lens[t];
        memset(buf, GUARD, sizeof buf);
        cai_kern_splat(esz, buf, value, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(memcmp(buf + i * esz, value, (size_t)esz), 0, "esz %ld n %ld: element %ld",
                         (long)esz, (long)n, (long)i);
        for (int64_t b = n * esz; b < n * esz + 64; b++)
            cr_assert_eq((unsigned char)buf[b], GUARD, "esz %ld n %ld: byte %ld past the end",
                         (long)esz, (long)n, (long)b);
    }
}

Test(kern_move, splat_keeps_every_bit_and_stops_at_n) {
    uint32_t nan32 = 0x7FC12345u; /* NaN payloads must survive: moved as bits, not values */
    uint64_t nan64 = 0x7FF4000000ABCDEFull;
    int64_t big = -1234567890123ll;
    uint8_t one = 1;
    check_splat(4, &nan32);
    check_splat(8, &nan64);
    check_splat(8, &big);
    check_splat(1, &one);
}

Test(kern_move, bool_to_float_widens_any_nonzero_byte_to_one) {
    enum { N = 67 }; /* a vector tail */
    uint8_t m[N];
    float f[N + 1];
    double d[N + 1];
    for (int i = 0; i < N; i++)
        m[i] = (uint8_t)(i % 3 == 0 ? 0 : i % 3 == 1 ? 1 : 0x80);
    f[N] = -7.0f;
    d[N] = -7.0;
    cai_kern_bool_to_float(KERN_F32, f, m, N);
    cai_kern_bool_to_float(KERN_F64, d, m, N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(f[i], m[i] ? 1.0f : 0.0f, "f32 element %d", i);
        cr_assert_eq(d[i], m[i] ? 1.0 : 0.0, "f64 element %d", i);
    }
    cr_assert_eq(f[N], -7.0f, "f32: wrote past n");
    cr_assert_eq(d[N], -7.0, "f64: wrote past n");
}

/* x[r, c] - s[r] (s broadcast along each row, as a softmax's row sum is), then masked_fill
 * by a bool [rows, cols] mask: both through cai_kern_pointwise, against plain loops. */
Test(kern_move, pointwise_row_broadcast_and_bool_mask) {
    enum { R = 37, C = 64 };
    static float x[R * C], y[R * C], z[R * C];
    static double xd[R * C], yd[R * C];
    float s[R];
    double sd[R];
    static uint8_t mask[R * C];
    for (int r = 0; r < R; r++) {
        s[r] = 0.5f * (float)(r % 9) - 1.0f;
        sd[r] = s[r];
        for (int c = 0; c < C; c++) {
            x[r * C + c] = 0.25f * (float)((r * 7 + c) % 17) - 2.0f;
            xd[r * C + c] = x[r * C + c];
            mask[r * C + c] = c > r % C; /* causal */
        }
    }
    int64_t shape[2] = {R, C}, contig[2] = {C, 1};
    kern_src sub_f[2] = {{.data = x, .strides = {C, 1}}, {.data = s, .strides = {1, 0}}};
    kern_src sub_d[2] = {{.data = xd, .strides = {C, 1}}, {.data = sd, .strides = {1, 0}}};
    cr_assert_eq(cai_kern_pointwise(KPW_SUB, KERN_F32, KERN_F32, 2, shape, y, contig, sub_f, 1, 0),
                 0);
    cr_assert_eq(cai_kern_pointwise(KPW_SUB, KERN_F64, KERN_F64, 2, shape, yd, contig, sub_d, 1, 0),
                 0);
    kern_src fill[2] = {{.data = y, .strides = {C, 1}}, {.data = mask, .strides = {C, 1}}};
    cr_assert_eq(cai_kern_pointwise(KPW_MASKED_FILL, KERN_F32, KERN_BOOL, 2, shape, z, contig, fill,
                                    -3.0, 0),
                 0);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            int i = r * C + c;
            cr_assert_eq(y[i], x[i] - s[r], "sub f32 (%d, %d)", r, c);
            cr_assert_eq(yd[i], xd[i] - sd[r], "sub f64 (%d, %d)", r, c);
            cr_assert_eq(z[i], mask[i] ? -3.0f : y[i], "masked_fill (%d, %d)", r, c);
        }
}

/* Rows of 300 (three to a block) and a bool mask that is itself broadcast along the rows:
 * x + 2 * s[r], then masked_fill by m[r], in float64, against plain loops. */
Test(kern_move, pointwise_long_rows_and_a_row_broadcast_mask) {
    enum { R = 11, C = 300 };
    static double x[R * C], y[R * C], z[R * C];
    double s[R];
    uint8_t m[R];
    for (int r = 0; r < R; r++) {
        s[r] = 0.125 * r - 0.5;
        m[r] = (uint8_t)(r % 3 == 1);
        for (int c = 0; c < C; c++)
            x[r * C + c] = 0.5 * ((r * 13 + c) % 29) - 7.0;
    }
    int64_t shape[2] = {R, C}, contig[2] = {C, 1};
    kern_src add[2] = {{.data = x, .strides = {C, 1}}, {.data = s, .strides = {1, 0}}};
    cr_assert_eq(cai_kern_pointwise(KPW_ADD, KERN_F64, KERN_F64, 2, shape, y, contig, add, 2, 0),
                 0);
    kern_src fill[2] = {{.data = y, .strides = {C, 1}}, {.data = m, .strides = {1, 0}}};
    cr_assert_eq(
        cai_kern_pointwise(KPW_MASKED_FILL, KERN_F64, KERN_BOOL, 2, shape, z, contig, fill, 9, 0),
        0);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            int i = r * C + c;
            cr_assert_eq(y[i], x[i] + 2 * s[r], "add (%d, %d)", r, c);
            cr_assert_eq(z[i], m[r] ? 9.0 : y[i], "masked_fill (%d, %d)", r, c);
        }
}
