//! Guard pages for the bounds checks ("never read outside the buffers ggml passes"): a buffer copied into a
//! region of its own mapping whose neighbouring pages are inaccessible (`PROT_NONE`), either ending exactly
//! where the next page starts or starting exactly where the previous one ends. A kernel that reads a byte
//! past either end faults. A fault handler (`install_fault_handler`) prints the address and the case the
//! thread was running (`set_case`) before the process dies as it would have.
//!
//! Used by the tier-1 bounds tests (`arch/x86/bounds.rs`: every kernel table, inputs and outputs) and by
//! `bits` (every case's inputs to our symbols, rlib and cdylib, alternately against either end). Prefetches
//! are exempt by the hardware: a prefetch of an inaccessible address never faults.

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::OnceLock;

/// Where a placed buffer meets the inaccessible page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The page starts right after the last byte (catches reads past the end).
    After,
    /// The page ends right before the first byte (catches reads before the start).
    Before,
}

/// A reusable region between two inaccessible pages; `place` copies a buffer against one of them.
pub struct GuardedRegion {
    map: *mut u8,
    map_len: usize,
    page: usize,
}

impl GuardedRegion {
    /// A region of at least `capacity` bytes (grown by `place` when a buffer needs more).
    pub fn new(capacity: usize) -> GuardedRegion {
        // SAFETY: `sysconf` has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = (capacity.div_ceil(page).max(1) + 2) * page;
        // SAFETY: a fresh private anonymous mapping; its first and last pages are made inaccessible at once.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED, "mmap of a guarded region");
            let map = map as *mut u8;
            let first = map as *mut libc::c_void;
            let last = map.add(map_len - page) as *mut libc::c_void;
            assert_eq!(libc::mprotect(first, page, libc::PROT_NONE), 0, "mprotect");
            assert_eq!(libc::mprotect(last, page, libc::PROT_NONE), 0, "mprotect");
            GuardedRegion { map, map_len, page }
        }
    }

    /// Bytes between the two guard pages.
    fn capacity(&self) -> usize {
        self.map_len - 2 * self.page
    }

    /// A copy of `bytes` against the guard page on `side`, valid until the next `place`.
    pub fn place(&mut self, bytes: &[u8], side: Side) -> &mut [u8] {
        if bytes.len() > self.capacity() {
            *self = GuardedRegion::new(bytes.len());
        }
        let start = match side {
            Side::After => self.page + self.capacity() - bytes.len(),
            Side::Before => self.page,
        };
        // SAFETY: `start..start + len` lies inside the accessible pages of the mapping, which `self` owns; the
        // returned borrow is exclusive and ends before the region can be moved or unmapped.
        unsafe {
            let data = self.map.add(start);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
            std::slice::from_raw_parts_mut(data, bytes.len())
        }
    }
}

impl Drop for GuardedRegion {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// Floats viewed as bytes, for placing them.
pub fn float_bytes(x: &[f32]) -> &[u8] {
    // SAFETY: any f32 is four plain bytes.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u8, std::mem::size_of_val(x)) }
}

/// Placed bytes viewed as floats (a placement of whole floats is 4-byte aligned: both ends of the region are
/// page-aligned).
pub fn as_floats(b: &mut [u8]) -> &mut [f32] {
    assert!((b.as_ptr() as usize).is_multiple_of(4) && b.len().is_multiple_of(4));
    // SAFETY: aligned, whole floats, every bit pattern a valid f32; the borrow is passed on.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut f32, b.len() / 4) }
}

const CASE_BYTES: usize = 240;

thread_local! {
    /// The case this thread is running, for the fault handler (a fixed buffer: a handler must not allocate).
    static CASE: Cell<([u8; CASE_BYTES], usize)> = const { Cell::new(([0; CASE_BYTES], 0)) };
}

/// Names the case this thread runs next, for the fault handler's message (no allocation: cheap per call).
pub fn set_case(label: std::fmt::Arguments<'_>) {
    struct Fixed([u8; CASE_BYTES], usize);
    impl std::fmt::Write for Fixed {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let n = s.len().min(CASE_BYTES - self.1);
            self.0[self.1..self.1 + n].copy_from_slice(&s.as_bytes()[..n]);
            self.1 += n;
            Ok(())
        }
    }
    let mut fixed = Fixed([0; CASE_BYTES], 0);
    let _ = fixed.write_fmt(label);
    CASE.with(|c| c.set((fixed.0, fixed.1)));
}

/// The action installed before ours: the handler puts it back, so that the fault, raised again when the handler
/// returns, ends the process as it would have (Rust's stack-overflow report included).
static PREVIOUS_ACTION: OnceLock<libc::sigaction> = OnceLock::new();

extern "C" fn on_fault(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let write = |bytes: &[u8]| {
        // SAFETY: `write(2)` on stderr from bytes we own; async-signal-safe.
        unsafe { libc::write(2, bytes.as_ptr() as *const libc::c_void, bytes.len()) };
    };
    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let mut hex = *b"0x0000000000000000\n";
    for (i, digit) in hex[2..18].iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[(addr >> (60 - 4 * i)) & 0xf];
    }
    write(b"\nbounds: memory fault (a guard page touched?) at ");
    write(&hex);
    write(b"bounds: while running: ");
    let (label, n) = CASE.with(|c| c.get());
    write(&label[..n]);
    write(b"\n");
    if let Some(previous) = PREVIOUS_ACTION.get() {
        // SAFETY: puts back the action that was installed before ours; async-signal-safe.
        unsafe { libc::sigaction(libc::SIGSEGV, previous, std::ptr::null_mut()) };
    }
}

/// Installs the SIGSEGV handler that names the running case (once per process).
pub fn install_fault_handler() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed `sigaction` is a valid start; the handler has the SA_SIGINFO signature, runs on the
        // alternate stack where one is set (a stack overflow), and calls only async-signal-safe functions.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(libc::SIGSEGV, &action, &mut previous), 0);
            let _ = PREVIOUS_ACTION.set(previous);
        }
    });
}
