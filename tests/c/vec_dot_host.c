/* A host for one ggml CPU backend module, as a release llama.cpp loads it (dlopen, RTLD_LOCAL): it calls each
 * low-bit vec_dot twice on the same random rows, once through the process's global scope (where a preloaded
 * libggml_lowbit.so defines it, as the module's own relocations bind it) and once as the module's own
 * definition (stock), and counts results whose bits differ.
 *
 *   vec_dot_host MODULE CASES      prints "SYMBOL: N cases, M mismatches" per symbol; exit 1 on a mismatch
 *   vec_dot_host MODULE CASES quantizers
 *                                  the same for quantize_row_q8_0 and quantize_row_q8_K, whose rows hold values
 *                                  of every magnitude and, in a quarter of the cases, NaNs with payloads and
 *                                  infinities; the output bytes are compared
 *   vec_dot_host MODULE CASES race THREADS
 *                                  THREADS threads released at once make their first calls together (so a
 *                                  preloaded library configures itself, probes stock and picks its direct paths
 *                                  under contention), then CASES rows each through every vec_dot, each result
 *                                  against stock's; prints "race: T threads, N calls, M mismatches" */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*vec_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);

static __thread uint64_t state = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

/* q8_0 activations: an f16 scale and 32 quants per block. */
static void fill_q8_0(uint8_t *y, int n) {
    for (int b = 0; b < n / 32; b++) {
        uint16_t d = 0x2800 + next() % 0x1400;
        memcpy(y + 34 * b, &d, 2);
        for (int j = 0; j < 32; j++) y[34 * b + 2 + j] = (uint8_t) next();
    }
}

/* q8_K activations: an f32 scale, 256 quants and their 16 sums per block, as ggml's quantizer writes them. */
static void fill_q8_k(uint8_t *y, int n) {
    for (int b = 0; b < n / 256; b++) {
        uint8_t *blk = y + 292 * b;
        float d = (float) (1 + next() % 1000) * 1e-4f;
        memcpy(blk, &d, 4);
        for (int j = 0; j < 256; j++) blk[4 + j] = (uint8_t) next();
        for (int g = 0; g < 16; g++) {
            int16_t sum = 0;
            for (int j = 0; j < 16; j++) sum += (int8_t) blk[4 + 16 * g + j];
            memcpy(blk + 260 + 2 * g, &sum, 2);
        }
    }
}

struct format {
    const char *symbol;
    int weights, block_bytes, scale_at, q8_k;
};

static const struct format formats[] = {
    {"ggml_vec_dot_q2_0_q8_0", 64, 18, 0, 0},     {"ggml_vec_dot_q1_0_q8_0", 128, 18, 0, 0},
    {"ggml_vec_dot_tq2_0_q8_K", 256, 66, 64, 1},  {"ggml_vec_dot_tq1_0_q8_K", 256, 54, 52, 1},
    {"ggml_vec_dot_iq2_xxs_q8_K", 256, 66, 0, 1}, {"ggml_vec_dot_iq2_xs_q8_K", 256, 74, 0, 1},
    {"ggml_vec_dot_iq2_s_q8_K", 256, 82, 0, 1},   {"ggml_vec_dot_iq3_xxs_q8_K", 256, 98, 0, 1},
    {"ggml_vec_dot_iq3_s_q8_K", 256, 110, 0, 1},
};

/* One random row of `blocks` blocks of `fmt` in `x` (ordinary f16 scales) and its activations in `y`; returns
 * its length in weights. */
static int fill_row(const struct format *fmt, int blocks, uint8_t *x, uint8_t *y) {
    int n = blocks * fmt->weights;
    for (int b = 0; b < blocks; b++) {
        uint8_t *blk = x + b * fmt->block_bytes;
        for (int j = 0; j < fmt->block_bytes; j++) blk[j] = (uint8_t) next();
        uint16_t d = 0x2000 + next() % 0x1800;
        memcpy(blk + fmt->scale_at, &d, 2);
    }
    if (fmt->q8_k) fill_q8_k(y, n); else fill_q8_0(y, n);
    return n;
}

typedef void (*quantize_fn)(const float *, void *, int64_t);

/* One row of `n` floats for the quantizers: each block at its own magnitude, some values NaN (random payload,
 * either sign) or infinite in a quarter of the rows. */
static void fill_floats(float *x, int n, int qk) {
    int specials = next() % 4 == 0;
    for (int b = 0; b < n / qk; b++) {
        int e = (int) (next() % 60) - 30;
        for (int j = 0; j < qk; j++) {
            uint32_t bits = (uint32_t) next();
            float v = ((float) (bits >> 8) / (float) (1u << 24) * 2.0f - 1.0f) * ldexpf(1.0f, e);
            if (specials && next() % 16 == 0) {
                uint32_t u = (next() % 3 == 0) ? 0x7f800000u : (0x7f800000u | (uint32_t) (next() % 0x7fffff + 1));
                u |= (uint32_t) (next() & 1) << 31;
                memcpy(&v, &u, 4);
            }
            x[b * qk + j] = v;
        }
    }
}

static int check_quantizers(void *module, long cases) {
    static const struct {
        const char *symbol;
        int qk, block_bytes;
    } quantizers[] = {{"quantize_row_q8_0", 32, 34}, {"quantize_row_q8_K", 256, 292}};
    static float x[8 * 256];
    static uint8_t a[8 * 292], s[8 * 292];
    int failed = 0;
    for (size_t q = 0; q < sizeof quantizers / sizeof quantizers[0]; q++) {
        quantize_fn stock = (quantize_fn) dlsym(module, quantizers[q].symbol);
        quantize_fn global = (quantize_fn) dlsym(RTLD_DEFAULT, quantizers[q].symbol);
        if (!stock || !global) {
            printf("%s: not in this ggml\n", quantizers[q].symbol);
            continue;
        }
        long bad = 0;
        for (long c = 0; c < cases; c++) {
            int blocks = 1 + next() % 8, n = blocks * quantizers[q].qk;
            fill_floats(x, n, quantizers[q].qk);
            global(x, a, n);
            stock(x, s, n);
            bad += memcmp(a, s, (size_t) blocks * quantizers[q].block_bytes) != 0;
        }
        printf("%s: %ld cases, %ld mismatches\n", quantizers[q].symbol, cases, bad);
        failed |= bad != 0;
    }
    return failed;
}

struct race {
    void *module;
    long cases;
    pthread_barrier_t *start;
    uint64_t seed;
    long calls, bad;
};

/* One racing thread: waits at the barrier, then every format's global symbol (ours, preloaded) on its own rows
 * first, stock's after, bit for bit. */
static void *race_thread(void *arg) {
    struct race *r = arg;
    state = r->seed;
    enum { MAX_BLOCKS = 4 };
    static __thread uint8_t x[MAX_BLOCKS * 256 / 64 * 110], y[MAX_BLOCKS * 292 * 8];
    vec_dot_fn global[sizeof formats / sizeof formats[0]], stock[sizeof formats / sizeof formats[0]];
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        global[f] = (vec_dot_fn) dlsym(RTLD_DEFAULT, formats[f].symbol);
        stock[f] = (vec_dot_fn) dlsym(r->module, formats[f].symbol);
    }
    pthread_barrier_wait(r->start);
    for (long c = 0; c < r->cases; c++) {
        for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
            const struct format *fmt = &formats[(f + (size_t) r->seed) % (sizeof formats / sizeof formats[0])];
            size_t at = (size_t) (fmt - formats);
            if (!global[at] || !stock[at]) continue;
            int n = fill_row(fmt, 1 + next() % MAX_BLOCKS, x, y);
            float a = 0, s = 0;
            global[at](n, &a, 0, x, 0, y, 0, 1);
            stock[at](n, &s, 0, x, 0, y, 0, 1);
            r->calls++;
            r->bad += memcmp(&a, &s, sizeof a) != 0;
        }
    }
    return NULL;
}

static int race(void *module, long cases, int threads) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned) threads);
    struct race *r = calloc((size_t) threads, sizeof *r);
    pthread_t *t = calloc((size_t) threads, sizeof *t);
    for (int i = 0; i < threads; i++) {
        r[i] = (struct race) {module, cases, &start, 0x9e3779b97f4a7c15ull * (uint64_t) (i + 1), 0, 0};
        pthread_create(&t[i], NULL, race_thread, &r[i]);
    }
    long calls = 0, bad = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        calls += r[i].calls;
        bad += r[i].bad;
    }
    printf("race: %d threads, %ld calls, %ld mismatches\n", threads, calls, bad);
    fflush(stdout);
    return bad != 0;
}

int main(int argc, char **argv) {
    int racing = argc == 5 && strcmp(argv[3], "race") == 0;
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "quantizers") == 0) && !racing) {
        fprintf(stderr, "usage: vec_dot_host MODULE CASES [quantizers | race THREADS]\n");
        return 2;
    }
    void *module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        fprintf(stderr, "vec_dot_host: %s\n", dlerror());
        return 2;
    }
    void (*cpu_init)(void) = (void (*)(void)) dlsym(module, "ggml_cpu_init");
    if (cpu_init) cpu_init();
    long cases = atol(argv[2]);
    if (racing) return race(module, cases, atoi(argv[4]));
    if (argc == 4) {
        int failed = check_quantizers(module, cases);
        fflush(stdout);
        return failed;
    }
    int failed = 0;
    enum { MAX_BLOCKS = 8 };
    static uint8_t x[MAX_BLOCKS * 256 / 64 * 110], y[MAX_BLOCKS * 292 * 8];
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        const struct format *fmt = &formats[f];
        vec_dot_fn stock = (vec_dot_fn) dlsym(module, fmt->symbol);
        vec_dot_fn global = (vec_dot_fn) dlsym(RTLD_DEFAULT, fmt->symbol);
        if (!stock || !global) {
            printf("%s: not in this ggml\n", fmt->symbol);
            continue;
        }
        long bad = 0;
        for (long c = 0; c < cases; c++) {
            int n = fill_row(fmt, 1 + next() % MAX_BLOCKS, x, y);
            float a = 0, s = 0;
            global(n, &a, 0, x, 0, y, 0, 1);
            stock(n, &s, 0, x, 0, y, 0, 1);
            bad += memcmp(&a, &s, sizeof a) != 0;
        }
        printf("%s: %ld cases, %ld mismatches\n", fmt->symbol, cases, bad);
        failed |= bad != 0;
    }
    fflush(stdout);
    return failed;
}
