//! Instruction-set kernels. Each is an `unsafe fn` with `#[target_feature]`; only `dispatch` calls them, after
//! checking the CPU once.
#[cfg(target_arch = "x86_64")]
pub mod x86;
