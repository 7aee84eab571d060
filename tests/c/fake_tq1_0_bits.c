/* A TQ1_0 dot product that gives other bits than every modelled stock build: the real one's result with its
 * lowest bit flipped. Preloaded after libggml_lowbit.so it is the "stock" TQ1_0 the library finds, while every
 * other symbol is the real stock's (tests/preload.rs): the library must keep the float order it probed, say
 * that TQ1_0's stock symbol gives other bits, and pass TQ1_0's calls to it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

typedef void (*vec_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);

void ggml_vec_dot_tq1_0_q8_K(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                             int nrc) {
    vec_dot_fn real = (vec_dot_fn) dlsym(RTLD_NEXT, "ggml_vec_dot_tq1_0_q8_K");
    unsigned bits;
    real(n, s, bs, vx, bx, vy, by, nrc);
    memcpy(&bits, s, sizeof bits);
    bits ^= 1u;
    memcpy(s, &bits, sizeof bits);
}
