//! llama.cpp's RPC workers for `e2e --rpc` and the tests: local `ggml-rpc-server`s on 127.0.0.1, each on a port
//! the kernel picks, with or without the library preloaded, stopped by their pids when dropped (also when a run
//! fails).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The worker program of the builds that have one (the pinned tree's `haswell-rpc`, Debian's llama.cpp).
pub const SERVER: &str = "ggml-rpc-server";

/// A port nothing listens on now (the kernel's choice for a bind to port 0).
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free local port: {e}"))
}

/// One `ggml-rpc-server` on 127.0.0.1, killed when dropped.
pub struct Worker {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Worker {
    /// Starts `tools/ggml-rpc-server` with `threads` threads, `lib` preloaded if given (with `GGML_LOWBIT_LOG=1`
    /// either way, so its log says whether the library configured itself), its output in `dir/name.log`; returns
    /// once it accepts connections (at most 20 s).
    pub fn start(
        tools: &Path,
        dir: &Path,
        name: &str,
        lib: Option<&Path>,
        threads: usize,
    ) -> Result<Worker, String> {
        let port = free_port()?;
        let log = dir.join(format!("{name}.log"));
        let file = || std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()));
        let out = file()?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(tools.join(SERVER));
        cmd.args([
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            &threads.to_string(),
        ])
        .env_remove("LD_PRELOAD")
        .env("GGML_LOWBIT_LOG", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
        if let Some(lib) = lib {
            cmd.env("LD_PRELOAD", lib);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", tools.join(SERVER).display()))?;
        let mut worker = Worker { child, port, log };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = worker.child.try_wait() {
                return Err(format!("{name} exited ({status}): {}", worker.text()));
            }
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("{name} never listened on port {port}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(worker)
    }

    /// `127.0.0.1:PORT`, as `--rpc` takes it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Everything the worker printed so far.
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Host connections the worker accepted so far (a host run opens one or more).
    pub fn connections(&self) -> usize {
        self.text().matches("Accepted client connection").count()
    }

    /// Whether the library configured itself in this worker (its log line), i.e. it served the worker's calls.
    pub fn library_on(&self) -> bool {
        self.text().contains("ggml-lowbit: float order ")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` workers of `tools` (`lib` preloaded if given), named `prefix-0..`, their endpoints joined for `--rpc`.
pub fn start_workers(
    tools: &Path,
    dir: &Path,
    prefix: &str,
    (n, threads): (usize, usize),
    lib: Option<&Path>,
) -> Result<(Vec<Worker>, String), String> {
    let workers = (0..n)
        .map(|i| Worker::start(tools, dir, &format!("{prefix}-{i}"), lib, threads))
        .collect::<Result<Vec<_>, _>>()?;
    let endpoints = workers
        .iter()
        .map(Worker::endpoint)
        .collect::<Vec<_>>()
        .join(",");
    Ok((workers, endpoints))
}

/// `args` of a llama.cpp tool sent to the workers at `endpoints`: every layer offloaded (`-ngl 99`).
pub fn over_workers(args: &[String], endpoints: &str) -> Vec<String> {
    let mut args = args.to_vec();
    args.extend(["--rpc".into(), endpoints.into(), "-ngl".into(), "99".into()]);
    args
}
