// Loops of known work, compiled like the kernels for the op counter (tests/metal.rs pins what it reports).
#include "metal_stdlib"

using namespace metal;

extern "C" {

// Per element: two loads, one conversion, one fma.
float probe_convert_fma(const unsigned char *p, const float *y, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc = fma(float(p[i]), y[i], acc);
    return acc;
}

// The same, two elements an iteration: twice the work per iteration.
float probe_convert_fma_x2(const unsigned char *p, const float *y, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i += 2) {
        acc = fma(float(p[i]), y[i], acc);
        acc = fma(float(p[i + 1]), y[i + 1], acc);
    }
    return acc;
}

// Per element: two loads, one and, one select (its test folded in), one add.
float probe_select(const unsigned char *p, const float *y, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc += select(0.0f, y[i], bool(p[i] & 4));
    return acc;
}

// Per element: one load, one conversion, one multiply, one floor, one add; an inner FOR_UNROLL-style loop of
// 4 that must be unrolled into it.
float probe_floor_unrolled(const unsigned char *p, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i += 4) {
        _Pragma("GCC unroll 128") for (int j = 0; j < 4; ++j) acc += floor(float(p[i + j]) * 0.25f);
    }
    return acc;
}

// An inner loop the compiler cannot unroll: the counter must refuse it.
float probe_rolled(const unsigned char *p, const int *len, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < len[i]; ++j) acc += float(p[j]);
    return acc;
}

} // extern "C"
