/* A Q1_0 dot product in an order neither modelled stock build has: the real one's result with its lowest bit
 * flipped. Preloaded after libggml_lowbit.so it is what the library's probe finds as "stock" Q1_0, while Q2_0
 * and the quantizer are the real stock's (tests/preload.rs): the library must then say that the stock Q1_0
 * follows neither modelled order and pass Q1_0 alone to stock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

typedef void (*vec_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);

void ggml_vec_dot_q1_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                            int nrc) {
    vec_dot_fn real = (vec_dot_fn) dlsym(RTLD_NEXT, "ggml_vec_dot_q1_0_q8_0");
    unsigned bits;
    real(n, s, bs, vx, bx, vy, by, nrc);
    memcpy(&bits, s, sizeof bits);
    bits ^= 1u;
    memcpy(s, &bits, sizeof bits);
}
