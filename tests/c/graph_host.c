/* A graph-level check over one ggml build, through ggml's public API only: it loads the build's libggml-base and
 * one CPU backend module as a release llama.cpp does (dlopen, RTLD_LOCAL; a linked build's libggml-cpu the same way), builds a MUL_MAT of each low-bit
 * type against F32 columns (random weights quantized by ggml itself, random activations), computes it with the
 * backend's threads, and prints every result's bits as one hash per product, so that two runs (with and
 * without a preloaded library) can be compared line by line.
 *
 *   graph_host BASE MODULE THREADS [COLS,COLS,...]
 *                                     prints "TYPE ROWSxCOLS: HASH" per product, of 1, 7 and 33 columns or
 *                                     the listed counts (at most 8); exit 1 on an error
 *   graph_host BASE MODULE THREADS TYPE K ROWS COLS REPS
 *                                     times one product (ggml type number TYPE, K × ROWS weights, COLS
 *                                     columns) REPS times after one warm-up and prints each time in µs */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};

typedef void *(*init_fn)(struct init_params);
typedef void (*free_fn)(void *);
typedef void *(*new_tensor_2d_fn)(void *, int, int64_t, int64_t);
typedef void *(*mul_mat_fn)(void *, void *, void *);
typedef void *(*new_graph_fn)(void *);
typedef void (*build_forward_expand_fn)(void *, void *);
typedef void *(*get_data_fn)(const void *);
typedef size_t (*quantize_chunk_fn)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);
typedef void *(*backend_init_fn)(void);
typedef void *(*reg_dev_get_fn)(void *, size_t);
typedef void *(*dev_init_fn)(void *, const char *);
typedef void *(*reg_get_proc_address_fn)(void *, const char *);
typedef int (*graph_compute_fn)(void *, void *);
typedef void (*backend_free_fn)(void *);
typedef void (*set_n_threads_fn)(void *, int);

static void *need(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "graph_host: %s not found: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

static uint64_t state = 0x2545f4914f6cdd1dull;
static float uniform(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (float) (state >> 40) / (float) (1u << 24) * 2.0f - 1.0f;
}

/* The types, by ggml's numbers (the same in every build this checks), and the columns of each product: one
 * (decode), a few (a small batch) and more than the tiles take at once. The IQ types are quantized with an
 * importance matrix of ones (IQ2_XXS and IQ2_XS need one). */
static const struct {
    int type;
    const char *name;
    bool imatrix;
} types[] = {{42, "q2_0", false},   {41, "q1_0", false},   {35, "tq2_0", false},
             {34, "tq1_0", false},  {16, "iq2_xxs", true}, {17, "iq2_xs", true},
             {22, "iq2_s", true},   {18, "iq3_xxs", true}, {21, "iq3_s", true}};
static int64_t cols[8] = {1, 7, 33};
static size_t ncols_listed = 3;
enum { K = 1024, ROWS = 96 };

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5 && argc != 9) {
        fprintf(stderr, "usage: graph_host BASE MODULE THREADS [COLS,COLS,...|TYPE K ROWS COLS REPS]\n");
        return 1;
    }
    if (argc == 5) {
        ncols_listed = 0;
        for (char *p = argv[4], *end; *p; p = *end ? end + 1 : end) {
            long v = strtol(p, &end, 10);
            if (end == p || v < 1 || v > 4096 || ncols_listed == 8 || (*end && *end != ',')) {
                fprintf(stderr, "graph_host: bad column list %s\n", argv[4]);
                return 1;
            }
            cols[ncols_listed++] = v;
        }
    }
    void *base = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!base) {
        fprintf(stderr, "graph_host: %s\n", dlerror());
        return 1;
    }
    void *module = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        fprintf(stderr, "graph_host: %s\n", dlerror());
        return 1;
    }
    init_fn init = (init_fn) need(base, "ggml_init");
    free_fn ctx_free = (free_fn) need(base, "ggml_free");
    new_tensor_2d_fn new_tensor_2d = (new_tensor_2d_fn) need(base, "ggml_new_tensor_2d");
    mul_mat_fn mul_mat = (mul_mat_fn) need(base, "ggml_mul_mat");
    new_graph_fn new_graph = (new_graph_fn) need(base, "ggml_new_graph");
    build_forward_expand_fn expand = (build_forward_expand_fn) need(base, "ggml_build_forward_expand");
    get_data_fn get_data = (get_data_fn) need(base, "ggml_get_data");
    quantize_chunk_fn quantize = (quantize_chunk_fn) need(base, "ggml_quantize_chunk");
    reg_dev_get_fn dev_get = (reg_dev_get_fn) need(base, "ggml_backend_reg_dev_get");
    dev_init_fn dev_init = (dev_init_fn) need(base, "ggml_backend_dev_init");
    reg_get_proc_address_fn proc = (reg_get_proc_address_fn) need(base, "ggml_backend_reg_get_proc_address");
    graph_compute_fn compute = (graph_compute_fn) need(base, "ggml_backend_graph_compute");
    backend_free_fn backend_free = (backend_free_fn) need(base, "ggml_backend_free");
    /* A DL build's module registers itself through ggml_backend_init; a linked one (libggml-cpu.so beside
     * libggml-base) exports its registry as ggml_backend_cpu_reg. */
    backend_init_fn module_init = (backend_init_fn) dlsym(module, "ggml_backend_init");
    if (!module_init) module_init = (backend_init_fn) need(module, "ggml_backend_cpu_reg");

    void *reg = module_init();
    void *backend = reg ? dev_init(dev_get(reg, 0), NULL) : NULL;
    if (!backend) {
        fprintf(stderr, "graph_host: the CPU backend does not start\n");
        return 1;
    }
    set_n_threads_fn set_threads = (set_n_threads_fn) proc(reg, "ggml_backend_set_n_threads");
    if (!set_threads) {
        fprintf(stderr, "graph_host: ggml_backend_set_n_threads not found\n");
        return 1;
    }
    set_threads(backend, atoi(argv[3]));

    if (argc == 9) {
        int type = atoi(argv[4]), reps = atoi(argv[8]);
        int64_t k = atoll(argv[5]), rows = atoll(argv[6]), ncols = atoll(argv[7]);
        struct init_params params = {(size_t) (k * rows + k * ncols + rows * ncols) * 4 + (16u << 20), NULL, false};
        void *ctx = init(params);
        void *a = new_tensor_2d(ctx, type, k, rows);
        void *b = new_tensor_2d(ctx, 0, k, ncols);
        float *row = malloc(sizeof(float) * k);
        char *wq = get_data(a);
        size_t row_bytes = 0;
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < k; i++) row[i] = uniform();
            row_bytes = quantize(type, row, wq + row_bytes * r, 0, 1, k, NULL);
        }
        float *x = get_data(b);
        for (int64_t i = 0; i < k * ncols; i++) x[i] = uniform();
        void *graph = new_graph(ctx);
        expand(graph, mul_mat(ctx, a, b));
        for (int rep = -1; rep < reps; rep++) {
            double t0 = now_us();
            if (compute(backend, graph) != 0) {
                fprintf(stderr, "graph_host: compute failed\n");
                return 1;
            }
            if (rep >= 0) printf("%.1f\n", now_us() - t0);
        }
        free(row);
        ctx_free(ctx);
        backend_free(backend);
        return 0;
    }
    float *w = malloc(sizeof(float) * K * ROWS);
    float *ones = malloc(sizeof(float) * K);
    for (int i = 0; i < K; i++) ones[i] = 1.0f;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t c = 0; c < ncols_listed; c++) {
            struct init_params params = {(size_t) (K * ROWS + (K + ROWS) * cols[c]) * 4 + (16u << 20), NULL, false};
            void *ctx = init(params);
            void *a = new_tensor_2d(ctx, types[t].type, K, ROWS);
            void *b = new_tensor_2d(ctx, 0, K, cols[c]);
            for (int i = 0; i < K * ROWS; i++) w[i] = uniform();
            quantize(types[t].type, w, get_data(a), 0, ROWS, K, types[t].imatrix ? ones : NULL);
            float *x = get_data(b);
            for (int i = 0; i < K * cols[c]; i++) x[i] = uniform() * 4.0f;
            void *out = mul_mat(ctx, a, b);
            void *graph = new_graph(ctx);
            expand(graph, out);
            if (compute(backend, graph) != 0) {
                fprintf(stderr, "graph_host: compute failed\n");
                return 1;
            }
            uint64_t hash = 0xcbf29ce484222325ull;
            const uint32_t *bits = get_data(out);
            for (int i = 0; i < ROWS * cols[c]; i++) hash = (hash ^ bits[i]) * 0x100000001b3ull;
            printf("%s %dx%ld: %016llx\n", types[t].name, ROWS, (long) cols[c], (unsigned long long) hash);
            ctx_free(ctx);
        }
    }
    free(w);
    free(ones);
    backend_free(backend);
    return 0;
}
