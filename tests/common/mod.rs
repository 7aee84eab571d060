pub mod fork_c;
