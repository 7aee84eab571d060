/* Three stock symbols that give other bits than every modelled stock build: the real TQ1_0 dot product with the
 * lowest bit of its result flipped, the real q8_K quantizer with the lowest bit of its first quant flipped, and
 * the real Q2_0 dequantizer with the lowest bit of its first float flipped. Preloaded after libggml_lowbit.so
 * they are the "stock" symbols the library finds, while every other symbol is the real stock's
 * (tests/preload.rs): the library must keep the float order it probed, name these three, and pass exactly
 * their calls to them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void (*vec_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef void (*quantize_fn)(const float *, void *, int64_t);
typedef void (*dequantize_fn)(const void *, float *, int64_t);

void ggml_vec_dot_tq1_0_q8_K(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                             int nrc) {
    vec_dot_fn real = (vec_dot_fn) dlsym(RTLD_NEXT, "ggml_vec_dot_tq1_0_q8_K");
    unsigned bits;
    real(n, s, bs, vx, bx, vy, by, nrc);
    memcpy(&bits, s, sizeof bits);
    bits ^= 1u;
    memcpy(s, &bits, sizeof bits);
}

/* block_q8_K: float d, then the quants. */
void quantize_row_q8_K(const float *x, void *vy, int64_t k) {
    quantize_fn real = (quantize_fn) dlsym(RTLD_NEXT, "quantize_row_q8_K");
    real(x, vy, k);
    if (k >= 256) {
        ((unsigned char *) vy)[4] ^= 1u;
    }
}

void dequantize_row_q2_0(const void *vx, float *y, int64_t k) {
    dequantize_fn real = (dequantize_fn) dlsym(RTLD_NEXT, "dequantize_row_q2_0");
    unsigned bits;
    real(vx, y, k);
    if (k > 0) {
        memcpy(&bits, y, sizeof bits);
        bits ^= 1u;
        memcpy(y, &bits, sizeof bits);
    }
}
