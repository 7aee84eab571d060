/* A program with one ggml symbol, `ggml_vec_dot_q2_0_q8_0` (the generic C's chain, no contraction), for the
 * library preloaded where ggml is partial or linked into the program:
 *
 *   cc -DWITH_DOT -DWITH_MAIN q2_0_host.c        the dot product inside the program (a static build: its
 *                                               calls bind inside the executable)
 *   cc -shared -fPIC -DWITH_DOT q2_0_host.c      a "ggml" with this one symbol and none of the others
 *   cc -DWITH_MAIN q2_0_host.c -l…               a program that calls it through that library
 *
 * It runs 2,000 random rows (scales include ±0, subnormals, ±Inf and NaNs) and prints each result's bits. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef uint16_t half_bits;

#ifdef WITH_DOT
static float half_to_float(half_bits h) {
    uint32_t sign = (uint32_t) (h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        int e = 113;
        while (!(man & 0x400)) { man <<= 1; e--; }
        bits = sign | ((uint32_t) e << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* 64 weights per 18-byte block (an f16 scale, 2-bit codes c, weight (c − 1)·d), two 34-byte q8_0 blocks. */
void ggml_vec_dot_q2_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                            int nrc) {
    (void) bs; (void) bx; (void) by; (void) nrc;
    const uint8_t *x = vx, *y = vy;
    float sumf = 0;
    for (int i = 0; i < n / 64; i++) {
        const uint8_t *xb = x + 18 * i;
        half_bits d0;
        memcpy(&d0, xb, 2);
        float sumi = 0;
        for (int k = 0; k < 2; k++) {
            const uint8_t *yb = y + 34 * (2 * i + k);
            half_bits d1;
            memcpy(&d1, yb, 2);
            int isum = 0;
            for (int j = 0; j < 32; j++) {
                int w = 32 * k + j, code = (xb[2 + w / 4] >> (2 * (w % 4))) & 3;
                isum += (code - 1) * (int8_t) yb[2 + j];
            }
            float t = (float) isum * half_to_float(d1);
            sumi = sumi + t;
        }
        float p = sumi * half_to_float(d0);
        sumf = sumf + p;
    }
    *s = sumf;
}
#else
void ggml_vec_dot_q2_0_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);
#endif

#ifdef WITH_MAIN
static uint64_t state = 0x2545f4914f6cdd1dull;
static uint32_t next(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (uint32_t) (state >> 16);
}

static half_bits scale(void) {
    static const half_bits special[] = {0x0000, 0x8000, 0x0001, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe55};
    return next() % 16 == 0 ? special[next() % 8] : (half_bits) (0x2000 + next() % 0x1c00);
}

int main(void) {
    static uint8_t x[18 * 64], y[34 * 128];
    for (int c = 0; c < 2000; c++) {
        int nb = 1 + next() % 64;
        for (int i = 0; i < 18 * nb; i++) x[i] = (uint8_t) next();
        for (int i = 0; i < 34 * 2 * nb; i++) y[i] = (uint8_t) next();
        for (int i = 0; i < nb; i++) {
            half_bits d = scale();
            memcpy(x + 18 * i, &d, 2);
        }
        for (int i = 0; i < 2 * nb; i++) {
            half_bits d = scale();
            memcpy(y + 34 * i, &d, 2);
        }
        float s;
        ggml_vec_dot_q2_0_q8_0(64 * nb, &s, 0, x, 0, y, 0, 1);
        uint32_t bits;
        memcpy(&bits, &s, 4);
        printf("%08x\n", bits);
    }
    return 0;
}
#endif
