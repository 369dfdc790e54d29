//! Helpers of the mount tests, by concern: [`process`] runs the `presso` binary and other tools
//! with a time limit and checks what a test needs, [`mount`] gives each test a pool and mount
//! point that are always unmounted (also when a test panics), [`daemon`] mounts one by a
//! `presso mount -f` child that a test can `kill -9`, [`data`] makes deterministic data,
//! [`compare`] checks files and trees, [`loopdisk`] loop-mounts a small ext4 image,
//! [`syscalls`] wraps the system calls tests make directly, and [`shrink`] shrinks a failing
//! sequence of operations; [`shared`] makes shared pools on the test servers.

#![allow(dead_code, unused_imports)]

pub mod compare;
pub mod daemon;
pub mod data;
pub mod loopdisk;
pub mod mount;
pub mod process;
pub mod shared;
pub mod shrink;
pub mod syscalls;

pub use compare::*;
pub use daemon::*;
pub use data::*;
pub use loopdisk::*;
pub use mount::*;
pub use process::*;
pub use syscalls::*;
