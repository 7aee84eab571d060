//! Embeds a hash of the library's sources, so the harness and the tests can tell a stale libggml_lowbit.so
//! (cargo does not rebuild the cdylib when only tests or binaries need the crate) from a current one.
use std::path::Path;

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            visit(&p, files);
        } else {
            files.push(p);
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.toml");
    let mut files = Vec::new();
    visit(Path::new("src"), &mut files);
    files.push("Cargo.toml".into());
    files.sort();
    // FNV-1a over (path, contents) of every source file.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in &files {
        for b in f
            .to_string_lossy()
            .bytes()
            .chain(std::fs::read(f).unwrap_or_default())
        {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=GGML_LOWBIT_SOURCE_HASH={h:016x}");
    // A SONAME, so that a program linked against the library (the patched llama.cpp, ggml-patch/) records the
    // name rather than the path it was linked from.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libggml_lowbit.so");
}
