//! The A/B harness behind `ggml-lowbit-ab`: our symbols against the stock library's on the same inputs, for
//! bits (`bits`) and for speed side by side (`speed`).
pub mod bits;
pub mod cases;
pub mod e2e;
pub mod fork;
pub mod guard;
pub mod prebuilt;
pub mod results;
pub mod rpc;
pub mod speed;
