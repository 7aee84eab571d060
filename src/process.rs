//! Process-level helpers under every other module: one-write log lines, aborting with a message, and the panic
//! guard that keeps unwinding from reaching C. `dispatch`, `interpose`, `hook` and `ffi` sit above it.

/// Writes `ggml-lowbit: <message>` and a newline to stderr in one `write`: llama.cpp logs from its own thread
/// without Rust's stderr lock, and `eprintln!` writes a formatted line piece by piece, so a line of ours could
/// be split by one of its lines (seen under load: the harness then missed our "float order" line).
pub fn log_line(message: &str) {
    use std::io::Write;
    let line = format!("ggml-lowbit: {message}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Prints `ggml-lowbit: <message>` on stderr and aborts: for errors that must not go on silently.
pub fn fatal(message: &str) -> ! {
    log_line(message);
    std::process::abort()
}

/// Runs `f`, turning a panic into `fatal` so that no unwinding reaches C.
#[inline(always)]
pub fn guard<R>(symbol: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => fatal(&format!("internal error in {symbol}; aborting")),
    }
}
