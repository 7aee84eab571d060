/* A ggml_version() no ggml release has: preloaded after libggml_lowbit.so, it is what the mul_mat hook's
 * version check sees (tests/hook.rs), so the hook must stay out of the way. */
const char *ggml_version(void) { return "0.0.0-fake"; }
