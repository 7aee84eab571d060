/* A ggml_op_name() that names no op as ggml does: preloaded after libggml_lowbit.so, it is what the mul_mat
 * hook's layout self-test asks for the name of its product's op (tests/hook.rs), standing in for a ggml whose
 * layout the hook does not recognise, so the hook must stay out of the way. */
const char *ggml_op_name(int op) {
    (void) op;
    return "FAKE";
}
