/*
 * The PrismML fork's generic PTQ1_0 dot product as `formats.md` sections 3-4 specify it, written for this bench
 * (not taken from the fork, which is not available here): per 128-weight block, the 128 trits are read in the
 * fork's element order (a 16-byte stage then an 8-byte stage of qs, five digits each, digits outer; then qh,
 * four digits), then four integer sums against four q8_0 blocks, `sumi += d1 * isum` for each, then
 * `sumf += d0 * sumi`. The bench compiles it the way the fork is built on x86 (-O3 -mavx2 -mfma -mf16c).
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Also compiled inside the stand-in fork (`scripts/patched-llama.sh fork-*`, `ggml-patch/fork-types.patch`):
 * there FORK_IN_GGML is defined, FORK_NO_VEC_DOT / FORK_NO_DEQUANTIZE leave out the function the including
 * library does not take, and a build without F16C converts the scales with ggml's own (exact) conversion.
 */
#if defined(FORK_IN_GGML) && !defined(__F16C__)
float ggml_fp16_to_fp32(uint16_t h);
#define fp16_to_fp32(h) ggml_fp16_to_fp32(h)
#else
#define fp16_to_fp32(h) _cvtsh_ss(h)
#endif

typedef struct {
    uint8_t qs[24];
    uint8_t qh[2];
    uint16_t d;
} ptq1_0_block;

typedef struct {
    uint16_t d;
    int8_t qs[32];
} q8_0_block;

static const uint8_t pow3[5] = {1, 3, 9, 27, 81};

static inline int weight_of(uint8_t byte, int digit) {
    const uint8_t v = (uint8_t)(byte * pow3[digit]);
    return (int)(((uint16_t)v * 3) >> 8) - 1;
}

/* The 128 weights (-1, 0, +1) of a block in the fork's element order. */
static inline void block_weights(const ptq1_0_block *b, int8_t w[128]) {
    int at = 0;
    int j = 0;
    for (int stage = 32; stage >= 8; stage /= 2) {
        if (j + stage > 24) {
            continue;
        }
        for (int digit = 0; digit < 5; digit++) {
            for (int m = 0; m < stage; m++) {
                w[at++] = (int8_t)weight_of(b->qs[j + m], digit);
            }
        }
        j += stage;
    }
    for (int digit = 0; digit < 4; digit++) {
        for (int h = 0; h < 2; h++) {
            w[at++] = (int8_t)weight_of(b->qh[h], digit);
        }
    }
}

#ifndef FORK_NO_VEC_DOT
void fork_vec_dot_ptq1_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                              int nrc) {
    (void)bs;
    (void)bx;
    (void)by;
    (void)nrc;
    const ptq1_0_block *x = (const ptq1_0_block *)vx;
    const q8_0_block *y = (const q8_0_block *)vy;
    const int blocks = n / 128;
    float sumf = 0.0f;
    for (int i = 0; i < blocks; i++) {
        int8_t w[128];
        block_weights(&x[i], w);
        float sumi = 0.0f;
        for (int k = 0; k < 4; k++) {
            const q8_0_block *q8 = &y[4 * i + k];
            int isum = 0;
            for (int e = 0; e < 32; e++) {
                isum += w[32 * k + e] * q8->qs[e];
            }
            sumi += fp16_to_fp32(q8->d) * (float)isum;
        }
        sumf += fp16_to_fp32(x[i].d) * sumi;
    }
    *s = sumf;
}
#endif

#ifndef FORK_NO_DEQUANTIZE
/* The fork's dequantize_row_ptq1_0: ((int)trit - 1) * d per weight, in the element order above. */
void fork_dequantize_row_ptq1_0(const void *vx, float *y, int64_t k) {
    const ptq1_0_block *x = (const ptq1_0_block *)vx;
    const int64_t blocks = k / 128;
    for (int64_t i = 0; i < blocks; i++) {
        const float d = fp16_to_fp32(x[i].d);
        int8_t w[128];
        block_weights(&x[i], w);
        for (int e = 0; e < 128; e++) {
            y[128 * i + e] = (float)w[e] * d;
        }
    }
}
#endif
