/* Prints the sizes and field offsets of the two ggml structs the mul_mat hook reads, from the pinned tree's own
 * headers, one "name value" per line; tests/hook.rs compares them with src/hook.rs. */
#include <stddef.h>
#include <stdio.h>

#include "ggml.h"
#include "ggml-cpu-impl.h"

#define FIELD(type, field) printf(#type "." #field " %zu\n", offsetof(struct type, field))

int main(void) {
    printf("ggml_tensor %zu\n", sizeof(struct ggml_tensor));
    FIELD(ggml_tensor, type);
    FIELD(ggml_tensor, ne);
    FIELD(ggml_tensor, nb);
    FIELD(ggml_tensor, src);
    FIELD(ggml_tensor, data);
    printf("ggml_compute_params %zu\n", sizeof(struct ggml_compute_params));
    FIELD(ggml_compute_params, ith);
    FIELD(ggml_compute_params, nth);
    FIELD(ggml_compute_params, wsize);
    FIELD(ggml_compute_params, wdata);
    FIELD(ggml_compute_params, threadpool);
    FIELD(ggml_compute_params, use_ref);
    printf("GGML_TYPE_F32 %d\nGGML_TYPE_Q2_0 %d\n", (int)GGML_TYPE_F32, (int)GGML_TYPE_Q2_0);
    return 0;
}
