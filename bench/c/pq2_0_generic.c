/*
 * The PrismML fork's generic PQ2_0 dot product as `formats.md` section 4 specifies it, written for this bench
 * (not taken from the fork, which is not available here): per 128-weight block, four integer sums against four
 * q8_0 blocks, `sumi += d1 * isum` for each, then `sumf += d0 * sumi`. The bench compiles it the way the fork is
 * built on x86 (-O3 -mavx2 -mfma -mf16c), so GCC contracts each `+= a * b` into an FMA as it does there.
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
    uint16_t d;
    uint8_t qs[32];
} pq2_0_block;

typedef struct {
    uint16_t d;
    int8_t qs[32];
} q8_0_block;

#ifndef FORK_NO_VEC_DOT
void fork_vec_dot_pq2_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                             int nrc) {
    (void)bs;
    (void)bx;
    (void)by;
    (void)nrc;
    const pq2_0_block *x = (const pq2_0_block *)vx;
    const q8_0_block *y = (const q8_0_block *)vy;
    const int blocks = n / 128;
    float sumf = 0.0f;
    for (int i = 0; i < blocks; i++) {
        const float d0 = fp16_to_fp32(x[i].d);
        float sumi = 0.0f;
        for (int k = 0; k < 4; k++) {
            const q8_0_block *q8 = &y[4 * i + k];
            const uint8_t *codes = &x[i].qs[8 * k];
            int isum = 0;
            for (int b = 0; b < 8; b++) {
                for (int r = 0; r < 4; r++) {
                    const int weight = (int)((codes[b] >> (2 * r)) & 3) - 1;
                    isum += weight * q8->qs[4 * b + r];
                }
            }
            sumi += fp16_to_fp32(q8->d) * (float)isum;
        }
        sumf += d0 * sumi;
    }
    *s = sumf;
}
#endif

#ifndef FORK_NO_DEQUANTIZE
/* The fork's dequantize_row_pq2_0: ((int)code - 1) * d per weight, 128 weights per block. */
void fork_dequantize_row_pq2_0(const void *vx, float *y, int64_t k) {
    const pq2_0_block *x = (const pq2_0_block *)vx;
    const int64_t blocks = k / 128;
    for (int64_t i = 0; i < blocks; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 128; j++) {
            const int code = (x[i].qs[j / 4] >> (2 * (j % 4))) & 3;
            y[128 * i + j] = (float)(code - 1) * d;
        }
    }
}
#endif
