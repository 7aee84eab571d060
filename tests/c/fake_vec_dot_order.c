/* A dot product in an order neither modelled stock build has, standing in for a newer ggml's own kernel (ggml
 * >= 0.27.0's AVX2 Q2_0) or a build's own shape of one (Q1_0): the real one's result with its lowest bit
 * flipped. Compiled with -DFAKE_VEC_DOT=<symbol> and preloaded after libggml_lowbit.so, it is the "stock" kernel
 * the library's probe finds for that format, while the quantizer and every other format are the real stock's
 * (tests/preload.rs, tests/hook.rs): the library must pass that format alone to stock and serve the rest. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#ifndef FAKE_VEC_DOT
#error "compile with -DFAKE_VEC_DOT=<the vec_dot symbol to stand in for>"
#endif
#define NAME_OF(s) #s
#define NAME(s) NAME_OF(s)

typedef void (*vec_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);

void FAKE_VEC_DOT(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc) {
    vec_dot_fn real = (vec_dot_fn) dlsym(RTLD_NEXT, NAME(FAKE_VEC_DOT));
    unsigned bits;
    real(n, s, bs, vx, bx, vy, by, nrc);
    memcpy(&bits, s, sizeof bits);
    bits ^= 1u;
    memcpy(s, &bits, sizeof bits);
}
