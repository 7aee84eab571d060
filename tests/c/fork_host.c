/*
 * A stand-in for a program running on PrismML's fork: it calls the fork's PQ2_0 and PTQ1_0 symbols
 * (ggml_vec_dot_*_q8_0, dequantize_row_*) from a library linked at build time, the way llama.cpp's CPU backend
 * does, on deterministic pseudo-random rows, and prints one FNV-1a hash of every result's bits and the number
 * of calls. Run it plain and under LD_PRELOAD=libggml_lowbit.so: the lines must be identical.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void ggml_vec_dot_pq2_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                             int nrc);
void ggml_vec_dot_ptq1_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                              int nrc);
void dequantize_row_pq2_0(const void *vx, float *y, int64_t k);
void dequantize_row_ptq1_0(const void *vx, float *y, int64_t k);

static uint64_t state = 0x2545f4914f6cdd1dull;

static uint64_t next(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static uint64_t hash = 0xcbf29ce484222325ull;

static void mix(const float *v, size_t count) {
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < count * sizeof(float); i++) {
        hash = (hash ^ p[i]) * 0x100000001b3ull;
    }
}

/* Random bytes with a sane f16 scale (about 0.002..0.06) at `scale_at` of every block of `block_bytes`. */
static void fill(unsigned char *buf, size_t blocks, size_t block_bytes, size_t scale_at, uint16_t scale_base) {
    for (size_t b = 0; b < blocks; b++) {
        unsigned char *blk = buf + b * block_bytes;
        for (size_t j = 0; j < block_bytes; j++) {
            blk[j] = (unsigned char)next();
        }
        const uint16_t d = (uint16_t)(scale_base + next() % 0x1000);
        memcpy(blk + scale_at, &d, 2);
    }
}

int main(void) {
    static unsigned char x[64 * 34], y[256 * 34];
    static float out[64 * 128];
    long calls = 0;
    for (int round = 0; round < 400; round++) {
        const int blocks = 1 + round % 64;
        const int n = 128 * blocks;
        fill(y, (size_t)(4 * blocks), 34, 0, 0x2000);
        float s = 0.0f;
        fill(x, (size_t)blocks, 34, 0, 0x1c00);
        ggml_vec_dot_pq2_0_q8_0(n, &s, 0, x, 0, y, 0, 1);
        mix(&s, 1);
        dequantize_row_pq2_0(x, out, n);
        mix(out, (size_t)n);
        fill(x, (size_t)blocks, 28, 26, 0x1c00);
        ggml_vec_dot_ptq1_0_q8_0(n, &s, 0, x, 0, y, 0, 1);
        mix(&s, 1);
        dequantize_row_ptq1_0(x, out, n);
        mix(out, (size_t)n);
        calls += 4;
    }
    printf("fork host: %ld calls, results hash %016llx\n", calls, (unsigned long long)hash);
    return 0;
}
