"""A run through llama-cpp-py-sync's own Python API, as its users call it: a model loaded with `Llama`, a greedy
completion, and the logits of the last evaluation hashed as bit patterns.

    python py_sync_check.py PACKAGE_DIR MODEL THREADS

PACKAGE_DIR holds llama_cpp_py_sync/ (scripts/prebuilt-ggml.sh llama-cpp-py-sync-0.11739). Prints "text: ..."
and "logits: N values, sha256 HASH"; exits 1 with one line on an error.
"""
import hashlib
import sys

if len(sys.argv) != 4:
    print("usage: python py_sync_check.py PACKAGE_DIR MODEL THREADS", file=sys.stderr)
    sys.exit(1)
package, model, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, package)
try:
    from llama_cpp_py_sync import Llama
    from llama_cpp_py_sync._cffi_bindings import get_ffi, get_lib

    llm = Llama(model, n_ctx=256, n_batch=64, n_threads=threads, verbose=False, seed=1)
    text = llm.generate("The quick brown fox", max_tokens=24, temperature=0.0, top_k=1, repeat_penalty=1.0)
    lib, ffi = get_lib(), get_ffi()
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(llm._model))
    logits = bytes(ffi.buffer(lib.llama_get_logits_ith(llm._ctx, -1), 4 * n_vocab))
    print("text:", repr(text))
    print(f"logits: {n_vocab} values, sha256 {hashlib.sha256(logits).hexdigest()}")
except Exception as error:  # one line, no traceback
    print(f"py_sync_check: {error}", file=sys.stderr)
    sys.exit(1)
